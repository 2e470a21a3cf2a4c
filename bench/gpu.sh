#!/usr/bin/env bash
# dp's CUDA backend on one GPU: its tests, then training throughput against
# PyTorch eager, then achieved TFLOP/s on a large MLP against cuBLAS.
#
#   bench/gpu.sh                          builds build-gpu (meson -Dcuda=enabled) first
#   DP_BUILD=/path/to/build bench/gpu.sh  uses a build made elsewhere (no meson, no ninja)
#
# Stages (each one's failure is shown, and the next one runs):
#   1 build      meson setup + ninja, unless DP_BUILD is given
#   2 tests      tests/cuda/test_cuda_layers and test_cuda_group, and tests/dist/test_dist_nccl
#                (GPUs across processes: skipped with fewer than 2 GPUs), run directly
#   3 models     `dp bench --devices cuda:0` against bench/torch_gpu.py (the same
#                architecture from the same JSON, PyTorch eager), samples/s, side by side
#   4 large MLP  dp's training TFLOP/s on examples/large_mlp.json against torch.mm
#   5 plugin     bench/plugin_relu on cuda:0: a plugin relu with CUDA code (dp_plugin.h
#                version 2) against the built-in relu, time ratio (target <= 1.05)
#   6 precision  mixed precision: dp --precision bf16 against PyTorch's autocast variants
#                (channels_last + cudnn.benchmark; torch.compile with COMPILE=1) on the
#                ResNet at batch 256 and 1024, the large MLP's bf16 step against a bf16
#                torch.mm
#   7 accuracy   with Fashion-MNIST in <build>/data/fashion-mnist (DP_PACK_DATA=1
#                bench/gpu_pack.sh): the CNN trained 5 epochs in fp32 and in bf16 (two
#                runs of up to 300 s: give it a command of its own, STAGES=7)
#
# Environment (all optional):
#   STAGES         the stages to run after 1, in order (default "2 3 4 5 6"; 7 only when named):
#                  a 15-minute GPU session runs e.g. STAGES="2 5" first (tests), then "6", then "7"
#   DP_BUILD       a configured and built dp build directory (skips stage 1)
#   BUILD_DIR      where stage 1 builds (default: <repo>/build-gpu)
#   OUT            a directory: logs, results.jsonl and gpu_bench.json are written there
#   PYTHON         python3 with torch (default: python3)
#   BUDGET_S       seconds for the stages after 1 together (default 540: under a device command's 600); each step is
#                  also bounded by its own timeout
#   ROUNDS         interleaved dp/torch rounds per model (default 3; medians reported)
#   COMPILE        1: also torch.compile + autocast in stage 6 (a minute or more of compiling)
#   ACC_SEEDS      stage 7's shuffling seeds, one fp32 and one bf16 run each (default "1 2 3")
#   MLP_STEPS, CNN_STEPS, LARGE_STEPS, LARGE_BATCH   timed steps and the large MLP's batch
#   DP_EXTRA_LIBS  colon-separated directories of runtime libraries to add (e.g. a
#                  copied libdnnl.so.2); <build>/runtime-libs is added when it exists
# LD_LIBRARY_PATH gets the CUDA libraries of PyTorch's pip packages
# (site-packages/nvidia/*/lib) found through $PYTHON, for a machine whose
# cuBLAS, cuDNN and NCCL exist only there.
#
# Exit status: 0 when every test passed and every measurement ran, 1 otherwise.
set -u
set -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
STAGES=${STAGES:-2 3 4 5 6}
ROUNDS=${ROUNDS:-3}
MLP_STEPS=${MLP_STEPS:-500}
CNN_STEPS=${CNN_STEPS:-100}
LARGE_STEPS=${LARGE_STEPS:-20}
LARGE_BATCH=${LARGE_BATCH:-8192}
OPT='{"type": "sgd", "lr": 0.01, "momentum": 0.9}'
TORCH_PY="$here/torch_gpu.py"

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/gpu_bench_logs"
  LOGS="$OUT/gpu_bench_logs"
else
  LOGS=$(mktemp -d /tmp/dp_gpu_bench.XXXXXX)
fi
RESULTS="$LOGS/results.jsonl"
: > "$RESULTS"
failures=()
summary=()

say() { printf '%s\n' "$*"; }
stage() { say ""; say "=== $* ==="; }
fail() { failures+=("$1"); say "FAIL: $1"; }

# ---------------------------------------------------------------- timing --
start_s=$(date +%s)  # set again after stage 1: the budget is for the stages after it
left() { echo $((BUDGET_S - ($(date +%s) - start_s))); }
# bounded SECONDS CMD...: runs CMD with a timeout of min(SECONDS, budget left);
# 124 when it timed out, 125 when no time was left to start it.
bounded() {
  local want=$1 have
  shift
  have=$(left)
  if [ "$have" -lt 5 ]; then
    say "  (skipped: the time budget BUDGET_S=$BUDGET_S is spent)"
    return 125
  fi
  [ "$want" -gt "$have" ] && want=$have
  timeout -k 10 "$want" "$@"
}

# record KIND MODEL IMPL ROUND RC FILE: the last JSON line of FILE into results.jsonl.
record() {
  "$PY" - "$@" >> "$RESULTS" <<'EOF'
import json, sys
kind, model, impl, rnd, rc, path = sys.argv[1:7]
data = None
try:
    with open(path) as f:
        lines = [l.strip() for l in f if l.strip().startswith('{')]
    data = json.loads(lines[-1]) if lines else None
except Exception:
    data = None
print(json.dumps({'kind': kind, 'model': model, 'impl': impl, 'round': int(rnd), 'rc': int(rc), 'result': data}))
EOF
}

# -------------------------------------------------------- libraries -------
# CUDA libraries shipped in pip packages (nvidia-cublas, nvidia-cudnn, ...):
# every .../nvidia/**/lib directory with shared objects.
nv_dirs=$("$PY" - 2>/dev/null <<'EOF'
import os
try:
    import nvidia
except Exception:
    raise SystemExit(0)
dirs = set()
for base in list(getattr(nvidia, '__path__', [])):
    for dirpath, subdirs, files in os.walk(base):
        if dirpath[len(base):].count(os.sep) >= 3:
            subdirs[:] = []
        if os.path.basename(dirpath) == 'lib' and any('.so' in f for f in files):
            dirs.add(dirpath)
print(':'.join(sorted(dirs)))
EOF
)
extra="${DP_EXTRA_LIBS:-}"

# ---------------------------------------------------------- stage 1 -------
stage "1 build"
if [ -n "${DP_BUILD:-}" ]; then
  B=$(cd "$DP_BUILD" 2>/dev/null && pwd) || B=$DP_BUILD
  say "prebuilt: DP_BUILD=$B (not rebuilt)"
  summary+=("build: prebuilt $B")
else
  B=${BUILD_DIR:-$root/build-gpu}
  build_ok=1
  if [ ! -f "$B/build.ninja" ]; then
    say "meson setup $B -Dcuda=enabled"
    (cd "$root" && timeout -k 10 600 meson setup "$B" -Dcuda=enabled) > "$LOGS/build.log" 2>&1 || build_ok=0
  fi
  if [ "$build_ok" = 1 ]; then
    say "ninja -C $B"
    timeout -k 10 "${BUILD_TIMEOUT:-1800}" ninja -C "$B" >> "$LOGS/build.log" 2>&1 || build_ok=0
  fi
  if [ "$build_ok" = 1 ]; then
    summary+=("build: OK ($B)")
  else
    tail -n 40 "$LOGS/build.log"
    fail "build (log: $LOGS/build.log)"
    summary+=("build: FAILED (log: $LOGS/build.log)")
  fi
fi
start_s=$(date +%s)
# A build copied without its symbolic links (libdp.so -> libdp.so.1 ->
# libdp.so.X.Y.Z) cannot load libdp: put the links back.
for real in "$B"/src/libdp.so.[0-9]*.[0-9]*.[0-9]*; do
  [ -f "$real" ] || continue
  soname=$(readelf -d "$real" 2>/dev/null | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
  for link in "${soname:-libdp.so.1}" libdp.so; do
    if [ ! -e "$B/src/$link" ]; then
      say "restoring $B/src/$link -> $(basename "$real")"
      ln -sf "$(basename "$real")" "$B/src/$link"
    fi
  done
done
[ -d "$B/runtime-libs" ] && extra="$B/runtime-libs${extra:+:$extra}"
LD_LIBRARY_PATH="${extra:+$extra:}${nv_dirs:+$nv_dirs:}${LD_LIBRARY_PATH:-}"
LD_LIBRARY_PATH=${LD_LIBRARY_PATH%:}
export LD_LIBRARY_PATH
DP="$B/src/cli/dp"
LIBDP="$B/src/libdp.so"
[ -f "$B/plugins/swish.so" ] && export DP_TEST_PLUGIN_SWISH="$B/plugins/swish.so"
[ -f "$B/tests/plugins/fixture_plugin_relu.so" ] && export DP_TEST_PLUGIN_RELU="$B/tests/plugins/fixture_plugin_relu.so"
[ -f "$B/tests/plugins/fixture_v2_relu.so" ] && export DP_TEST_PLUGIN_V2_RELU="$B/tests/plugins/fixture_v2_relu.so"

# ---------------------------------------------------------- header --------
stage "machine"
gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -n 4)
[ -n "$gpu" ] || gpu="(nvidia-smi gave nothing)"
say "GPU (nvidia-smi):  $gpu"
# What the CPU's products run on: `dp devices`' cpu:0 (oneDNN's version and
# instruction set; ONEDNN_MAX_CPU_ISA caps it).
blas_core=$(timeout 30 "$DP" devices 2>/dev/null | sed -n 's/^cpu:0: CPU core 0 of //p')
[ -n "$blas_core" ] || blas_core="(dp devices named no cpu:0)"
say "CPU products:      $blas_core (ONEDNN_MAX_CPU_ISA=${ONEDNN_MAX_CPU_ISA:-(unset)})"
say "CPU:               $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores)"
torch_info=$(timeout 120 "$PY" -c 'import sys, torch; print("python %s, torch %s, CUDA %s, cuDNN %s, GPU visible to torch: %s" % (sys.version.split()[0], torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), torch.cuda.is_available()))' 2>&1 | tail -n 1)
say "PyTorch:           $torch_info"
dp_version=$(timeout 30 "$DP" --version 2>&1 | tail -n 1)
say "dp:                $DP ($dp_version)"
say "dp devices:"
timeout 60 "$DP" devices 2>&1 | sed 's/^/  /'
say "LD_LIBRARY_PATH:   ${LD_LIBRARY_PATH:-(empty)}"
# Which CUDA libraries dp resolves, and anything missing.
unloadable=""
for f in "$LIBDP" "$DP" "$B/tests/cuda/test_cuda_layers" "$B/tests/cuda/test_cuda_group" "$B/tests/dist/test_dist_nccl"; do
  if [ ! -e "$f" ]; then
    say "  not in the build: $f"
    continue
  fi
  nf=$(ldd "$f" 2>&1 | grep -E 'not found|no version information' | sort -u)
  if [ -n "$nf" ]; then
    say "  $f cannot load:"
    printf '%s\n' "$nf" | sed 's/^/    /'
    unloadable="$unloadable $f"
  fi
done
if [ -e "$LIBDP" ]; then
  say "  libdp.so resolves:"
  ldd "$LIBDP" 2>&1 | grep -E 'cudart|cublas|cudnn|nccl|dnnl|gomp|libstdc' | sed 's/^/    /'
fi
[ -n "$unloadable" ] && fail "shared libraries missing for:$unloadable (DP_EXTRA_LIBS or <build>/runtime-libs can add directories)"
"$PY" - "$gpu" "${ONEDNN_MAX_CPU_ISA:-(unset)}" "$blas_core" "$torch_info" "$dp_version" >> "$RESULTS" <<'EOF'
import json, platform, sys
gpu, max_isa, cpu, torch_info, dp = sys.argv[1:6]
print(json.dumps({'kind': 'header', 'model': '', 'impl': '', 'round': 0, 'rc': 0,
                  'result': {'gpu': gpu, 'onednn_max_cpu_isa': max_isa, 'cpu_products': cpu, 'torch': torch_info,
                             'dp': dp, 'host': platform.node()}}))
EOF

# ------------------------------------------------------ stage helpers -----
# said RC LOG LABEL: says how LABEL's step went (its log's last line; or
# FAILED with the last two, counted as a failure) and returns RC.
said() {
  local rc=$1 log=$2 label=$3
  if [ "$rc" != 0 ]; then
    say "  $label: FAILED (rc $rc): $(tail -n 2 "$log" | tr '\n' ' ')"
    fail "$label (log: $log)"
  else
    say "  $label: $(tail -n 1 "$log")"
  fi
  return "$rc"
}
# model_info MODEL: the torch translation's parameter count and shapes checked
# against dp's own model (libdp through ctypes), once per run (the reports'
# FLOP counts come from it).
model_info() {
  local m=$1 json="$root/examples/$1.json" rc
  [ -f "$LOGS/info_$m.log" ] && return 0
  bounded 120 "$PY" "$TORCH_PY" info "$json" --dp-lib "$LIBDP" > "$LOGS/info_$m.log" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    say "  $m: torch/dp parameter check failed (rc $rc):"
    tail -n 3 "$LOGS/info_$m.log" | sed 's/^/    /'
    fail "$m: the torch model does not match dp's (or libdp could not be loaded from python)"
    bounded 120 "$PY" "$TORCH_PY" info "$json" > "$LOGS/info_$m.log" 2>&1  # the counts at least
  fi
  say "  $m: $(tail -n 1 "$LOGS/info_$m.log")"
  record info "$m" torch 0 "$rc" "$LOGS/info_$m.log"
}
run_dp() {  # MODEL BATCH STEPS ROUND [IMPL EXTRA...]
  local m=$1 batch=$2 steps=$3 r=$4 impl=${5:-dp}
  shift 5 2>/dev/null || shift $#
  local log="$LOGS/${impl}_${m}_r$r.log"
  bounded 180 "$DP" bench "$root/examples/$m.json" --devices cuda:0 --batch-size "$batch" --steps "$steps" \
    --optimizer "$OPT" "$@" > "$log" 2>&1
  local rc=$?
  record bench "$m" "$impl" "$r" "$rc" "$log"
  said "$rc" "$log" "$impl $m round $r"
}
run_torch() {  # MODEL BATCH STEPS ROUND WARMUP [IMPL EXTRA...]
  local m=$1 batch=$2 steps=$3 r=$4 warm=$5 impl=${6:-torch}
  shift 6 2>/dev/null || shift $#
  local log="$LOGS/${impl}_${m}_r$r.log"
  bounded 180 "$PY" "$TORCH_PY" train "$root/examples/$m.json" --batch-size "$batch" --steps "$steps" \
    --warmup "$warm" --optimizer "$OPT" "$@" > "$log" 2>&1
  local rc=$?
  record bench "$m" "$impl" "$r" "$rc" "$log"
  said "$rc" "$log" "$impl $m round $r"
}

# ---------------------------------------------------------- stage 2 -------
stage2() {
  stage "2 CUDA tests"
  for t in cuda/test_cuda_layers cuda/test_cuda_group dist/test_dist_nccl; do
    exe="$B/tests/$t"
    t=${t#*/}
    log="$LOGS/$t.log"
    if [ ! -x "$exe" ]; then
      fail "$t: $exe not built"
      summary+=("$t: NOT BUILT")
      continue
    fi
    say "--- $t (log: $log)"
    t0=$(date +%s)
    bounded 240 "$exe" -nc > "$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    # doctest's failures and its closing lines; progress lines only around a crash.
    grep -E 'TEST CASE:|logged:|THREW|exception|FATAL|SIG|test cases:|assertions:|Status:|SKIP|FAIL|MESSAGE:' "$log" \
      | grep -v '^cuda_[a-z]*: [^SF]' | cut -c1-400 | head -n 80
    case $rc in
      0) verdict="PASS" ;;
      77) verdict="SKIPPED: $(grep -m1 SKIP "$log")" ;;
      124|137) verdict="TIMED OUT"; say "  last lines:"; tail -n 8 "$log" | sed 's/^/    /' ;;
      125) verdict="NOT RUN (time budget)" ;;
      *) verdict="FAIL (exit $rc)"; say "  last lines:"; tail -n 8 "$log" | sed 's/^/    /' ;;
    esac
    say "$t: $verdict (${secs}s)"
    summary+=("$t: $verdict (${secs}s; $(grep -m1 'test cases:' "$log" | sed 's/^\[doctest\] *//'))")
    # dist_nccl needs 2 GPUs: its skip on one is expected; the others' is a failure on a GPU machine.
    [ "$rc" = 0 ] || { [ "$rc" = 77 ] && [ "$t" = test_dist_nccl ]; } || fail "$t: $verdict"
    "$PY" - "$t" "$rc" "$log" >> "$RESULTS" <<'EOF'
import json, sys
name, rc, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
text = open(path, errors='replace').read()
lines = [l for l in text.splitlines() if 'test cases:' in l or 'assertions:' in l]
print(json.dumps({'kind': 'test', 'model': name, 'impl': '', 'round': 0, 'rc': rc,
                  'result': {'rc': rc, 'summary': lines, 'log_tail': text.splitlines()[-15:]}}))
EOF
  done
}

# ---------------------------------------------------------- stage 3 -------
stage3() {
  stage "3 training samples/s: dp (cuda:0) against PyTorch eager, batch 256, SGD momentum, TF32 off"
  # Parameter counts and layer-by-layer shapes of the torch translation, checked
  # against dp's own model (libdp through ctypes).
  for m in fashion_mnist_mlp cifar_resnet large_mlp; do
    model_info "$m"
  done

  for r in $(seq 1 "$ROUNDS"); do
    run_dp fashion_mnist_mlp 256 "$MLP_STEPS" "$r"
    run_torch fashion_mnist_mlp 256 "$MLP_STEPS" "$r" 20 torch
    run_dp cifar_resnet 256 "$CNN_STEPS" "$r"
    run_torch cifar_resnet 256 "$CNN_STEPS" "$r" 10 torch
  done
  run_torch cifar_resnet 256 "$CNN_STEPS" 1 10 torch_cudnn_benchmark --cudnn-benchmark
  run_dp cifar_resnet 256 "$CNN_STEPS" 1 dp_cudnn_benchmark --cudnn-benchmark
  say ""
  "$PY" "$TORCH_PY" report "$RESULTS" --section models | tee "$LOGS/table_models.txt"
}

# ---------------------------------------------------------- stage 4 -------
stage4() {
  stage "4 large MLP: dp's training TFLOP/s against a cuBLAS fp32 matrix product (TF32 off)"
  model_info large_mlp
  log="$LOGS/mm.log"
  bounded 120 "$PY" "$TORCH_PY" mm --m "$LARGE_BATCH" --k 4096 --n 4096 > "$log" 2>&1
  rc=$?
  record mm large_mlp torch 0 "$rc" "$log"
  said "$rc" "$log" "torch.mm"
  for r in 1 2; do
    run_dp large_mlp "$LARGE_BATCH" "$LARGE_STEPS" "$r"
  done
  run_torch large_mlp "$LARGE_BATCH" "$LARGE_STEPS" 1 3 torch
  say ""
  "$PY" "$TORCH_PY" report "$RESULTS" --section large_mlp | tee "$LOGS/table_large_mlp.txt"
}

# ---------------------------------------------------------- stage 5 -------
stage5() {
  stage "5 plugin overhead on cuda:0: plugin relu with CUDA code against the built-in relu (MLP, batch 256)"
  log="$LOGS/plugin_relu.log"
  plugin_so="$B/bench/bench_plugin_relu.so"
  bounded 120 "$B/bench/plugin_relu" 7 200 "$plugin_so" cuda:0 > "$log" 2>&1
  rc=$?
  record plugin plugin_relu dp 0 "$rc" "$log"
  said "$rc" "$log" "plugin relu on cuda:0" && summary+=("plugin relu on cuda:0: $(tail -n 1 "$log")")
  # docs/plugins.md's walk-through on a GPU: its CUDA plugin (built where nvcc is, packed by
  # gpu_pack.sh) trained by the training line of its CUDA block, as written, dp on PATH.
  if [ -f "$B/doc_plugin/scale.so" ]; then
    log="$LOGS/doc_plugin.log"
    line=$(sed -n '/^# needs: nvcc/,/^```/p' "$root/docs/plugins.md" | grep -m1 'dp train' | sed 's/^ *//')
    (cd "$B/doc_plugin" && PATH="$(dirname "$DP"):$PATH" bounded 120 sh -exc "$line") > "$log" 2>&1
    rc=$?
    if [ "$rc" = 0 ] && ! { tail -n 1 "$log" | grep -q '"devices": 2' && tail -n 1 "$log" | grep -q '"epochs": 2'; }; then
      rc=1  # it ran, but did not train 2 epochs on 2 devices
    fi
    record plugin doc_plugin dp 0 "$rc" "$log"
    said "$rc" "$log" "docs/plugins.md's CUDA plugin on cuda:0,cuda:0 (the walk-through's line)"
  else
    say "  (no $B/doc_plugin/scale.so: docs/plugins.md's CUDA plugin is packed by bench/gpu_pack.sh)"
  fi
}

# ---------------------------------------------------------- stage 6 -------
stage6() {
  stage "6 mixed precision: dp bf16 against PyTorch autocast (bf16) variants"
  model_info large_mlp
  for batch in 256 1024; do
    run_dp cifar_resnet "$batch" "$CNN_STEPS" 1 dp_bf16 --precision bf16
    run_dp cifar_resnet "$batch" "$CNN_STEPS" 1 dp_bf16_cudnn_benchmark --precision bf16 --cudnn-benchmark
    # cuDNN's graph API for the 16-bit convolutions (experimental, src/backends/cuda/ops/cudnn_graph.h)
    for layout in nchw nhwc; do
      DP_CUDNN_GRAPH=$layout run_dp cifar_resnet "$batch" "$CNN_STEPS" 1 "dp_bf16_graph_$layout" --precision bf16
      DP_CUDNN_GRAPH=$layout run_dp cifar_resnet "$batch" "$CNN_STEPS" 1 "dp_bf16_graph_${layout}_cudnn_benchmark" \
        --precision bf16 --cudnn-benchmark
    done
    run_torch cifar_resnet "$batch" "$CNN_STEPS" 1 10 torch_bf16_channels_last_cudnn_benchmark --amp bf16 --channels-last \
      --cudnn-benchmark
    if [ "${COMPILE:-0}" = 1 ]; then
      run_torch cifar_resnet "$batch" "$CNN_STEPS" 1 10 torch_compile_bf16 --amp bf16 --compile --cudnn-benchmark
    fi
  done
  log="$LOGS/mm_bf16.log"
  bounded 120 "$PY" "$TORCH_PY" mm --m "$LARGE_BATCH" --k 4096 --n 4096 --dtype bf16 > "$log" 2>&1
  rc=$?
  record mm_bf16 large_mlp torch 0 "$rc" "$log"
  said "$rc" "$log" "torch.mm bf16"
  run_dp large_mlp "$LARGE_BATCH" "$LARGE_STEPS" 1 dp_bf16 --precision bf16
  run_torch large_mlp "$LARGE_BATCH" "$LARGE_STEPS" 1 3 torch_bf16 --amp bf16
  say ""
  "$PY" "$TORCH_PY" report "$RESULTS" --section precision | tee "$LOGS/table_precision.txt"
}

# ---------------------------------------------------------- stage 7 -------
stage7() {
  # One run moves by about 0.4 points with the summation order alone (run 5), so each
  # precision runs once per shuffling seed (ACC_SEEDS) and the mean gap is the figure.
  stage "7 accuracy: the Fashion-MNIST CNN trained 5 epochs on cuda:0 in fp32 and in bf16 (seeds ${ACC_SEEDS:-1 2 3})"
  data="$B/data/fashion-mnist"
  if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    for seed in ${ACC_SEEDS:-1 2 3}; do
      for p in fp32 bf16; do
        log="$LOGS/accuracy_${p}_seed$seed.log"
        bounded 300 "$DP" train "$root/examples/fashion_mnist_cnn.json" --data "fashion-mnist:$data" --devices cuda:0 \
          --epochs 5 --batch-size 64 --precision "$p" --seed "$seed" > "$log" 2>&1
        rc=$?
        record accuracy fashion_mnist_cnn "dp_$p" "$seed" "$rc" "$log"
        said "$rc" "$log" "Fashion-MNIST CNN, 5 epochs, $p, seed $seed"
      done
    done
    "$PY" - "$RESULTS" <<'EOF' | tee "$LOGS/table_accuracy.txt"
import json, sys
acc = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r['kind'] == 'accuracy' and r['rc'] == 0 and r.get('result'):
        acc.setdefault(r['round'], {})[r['impl']] = r['result']['test_accuracy']
pairs = [(s, a['dp_fp32'], a['dp_bf16']) for s, a in sorted(acc.items()) if 'dp_fp32' in a and 'dp_bf16' in a]
for s, f, b in pairs:
    print(f'  seed {s}: fp32 {f:.4f}, bf16 {b:.4f}, gap {100 * (f - b):+.2f} points')
if pairs:
    print(f'  mean gap over {len(pairs)} seeds: {100 * sum(f - b for _, f, b in pairs) / len(pairs):+.2f} points '
          '(issue 12: within 0.5)')
EOF
  else
    say "  (no $data: the 5-epoch accuracy check needs Fashion-MNIST packed, DP_PACK_DATA=1 bench/gpu_pack.sh)"
  fi
}

# ---------------------------------------------------------- run ---------
for n in $STAGES; do
  case $n in
    [2-7]) "stage$n" ;;
    *) fail "STAGES: no stage $n (2-7)" ;;
  esac
done

# ---------------------------------------------------------- summary -------
json_out=""
if [ -n "${OUT:-}" ]; then
  json_out="$OUT/gpu_bench.json"
  "$PY" "$TORCH_PY" report "$RESULTS" --section all --json "$json_out" > /dev/null || fail "writing $json_out"
fi
stage "SUMMARY ($(( $(date +%s) - start_s ))s for stages $STAGES)"
say "GPU: $gpu | CPU products: $blas_core | $torch_info"
for s in "${summary[@]}"; do say "$s"; done
cat "$LOGS/table_models.txt" "$LOGS/table_large_mlp.txt" "$LOGS/table_precision.txt" 2>/dev/null
say "logs: $LOGS${json_out:+; table: $json_out}"
if [ "${#failures[@]}" -gt 0 ]; then
  say "FAILURES (${#failures[@]}):"
  for f in "${failures[@]}"; do say "  - $f"; done
  exit 1
fi
say "all stages OK"
exit 0
