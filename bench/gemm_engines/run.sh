#!/bin/bash
# OpenBLAS, oneDNN and BLIS on the products of dp's MLP step (gemm_step.cpp),
# each library built in and run in its own process, alternated over rounds
# (the machine is shared and noisy: read the ratios). Libraries not installed
# are skipped: apt-get install libopenblas-dev libdnnl-dev libblis-dev.
#
#   bench/gemm_engines/run.sh [rounds] [steps]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5} steps=${2:-300}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
libs=()
build() {  # name, flags...
  local name=$1; shift
  if g++ -O2 -std=c++17 -o "$out/$name" "$here/gemm_step.cpp" "$@" 2>/dev/null; then libs+=("$name"); fi
}
build openblas $(pkg-config --cflags --libs openblas 2>/dev/null || echo -lopenblas)
build onednn -DUSE_DNNL -ldnnl -lgomp
build blis -DUSE_BLIS -lblis
[ ${#libs[@]} -gt 0 ] || { echo "no GEMM library found" >&2; exit 1; }
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-(unset)}; $rounds rounds of $steps steps"
for r in $(seq "$rounds"); do
  for l in "${libs[@]}"; do
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 BLIS_NUM_THREADS=1 "$out/$l" "$steps" >> "$out/$l.jsonl"
  done
done
python3 - "$out" "${libs[@]}" <<'PY'
import json, statistics, sys
out, libs = sys.argv[1], sys.argv[2:]
runs = {l: [json.loads(x) for x in open(f'{out}/{l}.jsonl')] for l in libs}
med = lambda l, k: statistics.median(r[k] for r in runs[l])
base = libs[0]
print(f'{"library":22} {"1 thread":>10} {"vs " + base:>12} {"2 threads":>10} {"vs " + base:>12} {"2 vs 1":>7} {"GFLOP/s":>8} {"mallocs/step":>13}')
for l in libs:
    print(f'{runs[l][0]["library"]:22} {med(l, "one_thread"):10.0f} {med(l, "one_thread") / med(base, "one_thread"):11.2f}x '
          f'{med(l, "two_threads"):10.0f} {med(l, "two_threads") / med(base, "two_threads"):11.2f}x '
          f'{med(l, "two_threads") / med(l, "one_thread"):6.2f}x {med(l, "gflops_one"):8.1f} {runs[l][0]["mallocs_per_step"]:13d}')
print('(samples/s of the products alone, medians; 2 threads: 2 x 128 rows at once, what 2 devices compute)')
PY
