#!/usr/bin/env bash
# Fuzzes every target for SECONDS each, one after the other, in a build
# configured for fuzzing (README.md here):
#
#   CC=clang CXX=clang++ meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined \
#     -Dcuda=disabled -Db_lundef=false -Dbuildtype=debugoptimized
#   tests/fuzz/run.sh build-fuzz 60
#
# Builds only the fuzz targets (and the plugins they load), runs each on a
# temporary copy of its seed corpus and saved crash inputs (the tree is not
# modified, except for new crash inputs), and prints per target the
# executions, the new crashes and the known ones (inputs already in
# regressions/ that still crash). A crash (ASan, UBSan, a leak, an uncaught
# exception, a failed check, a timeout of 10 s, more than 2 GB) is copied to
# tests/fuzz/regressions/<target>/, where `meson test --suite fuzz` replays
# it from then on; the script then exits 1, as it does for a known one.
# Targets: all, or those named in FUZZ_TARGETS ("idx cifar10").
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
targets=${FUZZ_TARGETS:-"model_json train_step safetensors checkpoint idx cifar10 loader_json transform optimizer devices plugin_args"}

ninja_targets="tests/fuzz/fuzz_plugin.so plugins/swish.so plugins/rms_norm.so plugins/shape_probe.so"
for t in $targets; do ninja_targets+=" tests/fuzz/fuzz_$t"; done
# shellcheck disable=SC2086
ninja -C "$build" $ninja_targets >/dev/null || { echo "build failed: ninja -C $build $ninja_targets" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

status=0
report=()
for t in $targets; do
  corpus=$work/corpus/$t
  artifacts=$work/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  for d in "$here/corpus/$t" "$here/regressions/$t"; do
    [ -d "$d" ] && find "$d" -maxdepth 1 -type f ! -name '.*' -exec cp {} "$corpus/" \;
  done
  dict=()
  [ -f "$here/dicts/$t.dict" ] && dict=(-dict="$here/dicts/$t.dict")
  [ "$t" = train_step ] && dict=(-dict="$here/dicts/model_json.dict")  # model JSON after two bytes
  log=$work/$t.log
  echo "fuzzing $t for ${seconds}s ..." >&2
  # -max_len: inputs up to 16 KB (5 CIFAR records); the larger regression
  # inputs (deep JSON) are replayed whole by meson test, here cut.
  "$build/tests/fuzz/fuzz_$t" "$corpus" "${dict[@]}" -max_len=16384 -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  found=()
  known=()
  for f in "$artifacts"/*; do
    [ -f "$f" ] || continue
    # An input already kept (a regression not fixed yet) is not copied again.
    same=""
    for r in "$here/regressions/$t"/*; do
      [ -f "$r" ] && cmp -s "$f" "$r" && same=$r && break
    done
    if [ -n "$same" ]; then
      known+=("tests/fuzz/regressions/$t/$(basename "$same")")
      continue
    fi
    mkdir -p "$here/regressions/$t"
    cp "$f" "$here/regressions/$t/"
    found+=("tests/fuzz/regressions/$t/$(basename "$f")")
  done
  if [ ${#found[@]} -gt 0 ] || [ ${#known[@]} -gt 0 ] || [ $rc -ne 0 ]; then
    status=1
    echo "---- $t: exit $rc; the end of its log:" >&2
    tail -60 "$log" >&2
    for f in "${found[@]}"; do echo "new crash input: $f" >&2; done
    for f in "${known[@]}"; do echo "still crashes: $f" >&2; done
  fi
  report+=("$(printf '%-14s %12s %6s %6s' "$t" "${execs:-?}" "${#found[@]}" "${#known[@]}")")
done

printf '%-14s %12s %6s %6s\n' target executions new known
for line in "${report[@]}"; do echo "$line"; done
exit $status
