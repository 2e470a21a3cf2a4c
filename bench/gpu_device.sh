#!/usr/bin/env bash
# One call of the lent GPU machine (the `device` tool's run), prepared here:
#
#   DP_PACK_DATA=1 bench/gpu_pack.sh build        # here: .gpu/bundle.tar.xz (43 MB with the data)
#   run(command="OUTDIR=$OUT bench/gpu_device.sh", carry=[".gpu"], timeout_s=...)
#
# There it unpacks the bundle into /tmp/build, runs bench/gpu.sh's stages 2 and
# 5 (the CUDA tests, the plugin overhead), then the Python suite on that build,
# then (only if both passed, or FORCE=1) the stages in STAGES2 within
# TOTAL seconds of the call's start, and packs every log into
# $OUTDIR/logs.tar.gz: the tool returns at most 8 files, two folders down.
#
#   OUTDIR   where the results go ($OUT on the device machine)
#   STAGES2  stages after the tests (default "6 7 3 4": precision, accuracy, models, large MLP)
#   TOTAL    seconds for the whole call (default 540); stages that do not fit are skipped
#   FORCE=1  run STAGES2 even when a test failed
#
# (Written after the 2026-12-04 H200 session from the commands its calls ran by
# hand; as this script it has run only on a machine without a GPU, where the
# CUDA tests skip and it exits 1. Its first GPU use is its real test.)
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cd "$root"
: "${OUTDIR:?set OUTDIR to the device tool OUT folder}"
t0=$(date +%s)
rm -rf /tmp/o1 /tmp/o2  # (a warm machine keeps the last call's)
tar -xJf .gpu/bundle.tar.xz -C /tmp || { echo "no .gpu/bundle.tar.xz: run bench/gpu_pack.sh here first, carry .gpu"; exit 3; }
export DP_BUILD=/tmp/build PYTHON=${PYTHON:-python3} PYTHONUNBUFFERED=1
nv=$("$PYTHON" -c 'import nvidia, os; print(":".join(sorted({r for b in nvidia.__path__ for r, d, f in os.walk(b) if os.path.basename(r) == "lib"})))' 2>/dev/null)
OUT=/tmp/o1 STAGES="2 5" BUDGET_S=300 bash "$here/gpu.sh" 2>&1 | tee "$OUTDIR/tests.txt"
rc=$?
(LD_LIBRARY_PATH=/tmp/build/runtime-libs${nv:+:$nv} PYTHONPATH="$root/bindings/python" DP_LIBRARY=/tmp/build/src/libdp.so \
  DP_TORCH_PYTHON="$PYTHON" timeout 150 "$PYTHON" -m pytest -q -p no:cacheprovider "$root/bindings/python/tests" 2>&1 |
  tail -n 30) | tee "$OUTDIR/pytest.txt"
py=$?
echo "tests rc=$rc, Python suite rc=$py, after $(( $(date +%s) - t0 )) s"
left=$(( ${TOTAL:-540} - ($(date +%s) - t0) ))
[ "$rc" = 0 ] && rc=$py
if { [ "$rc" = 0 ] || [ "${FORCE:-0}" = 1 ]; } && [ "$left" -gt 60 ]; then
  OUT=/tmp/o2 STAGES="${STAGES2:-6 7 3 4}" BUDGET_S=$left ROUNDS=${ROUNDS:-2} bash "$here/gpu.sh" 2>&1 | tee "$OUTDIR/stages.txt"
  echo "stages rc=$? after $(( $(date +%s) - t0 )) s"
fi
tar -czf "$OUTDIR/logs.tar.gz" -C /tmp o1 $( [ -d /tmp/o2 ] && echo o2 )
exit "$rc"
