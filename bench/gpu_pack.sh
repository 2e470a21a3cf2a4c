#!/usr/bin/env bash
# Packs a CUDA build of dp for a GPU machine that has the NVIDIA driver and
# PyTorch but no Debian -dev packages (the lent H200): the build tree's
# programs and modules (rpaths are $ORIGIN-relative, so the layout is kept,
# debug information stripped) plus the runtime libraries such a machine lacks
# (OpenBLAS and its gfortran, Gloo and its own, ONNX and protobuf) in runtime-libs/, which bench/gpu.sh puts on
# LD_LIBRARY_PATH. cuBLAS, cuDNN and NCCL come from the machine (PyTorch's
# pip packages), as the same major versions.
#
#   bench/gpu_pack.sh [BUILD_DIR [OUT.tar.xz]]   (defaults: build-gpu, .gpu/bundle.tar.xz;
#                                                 DP_PACK_DATA=1 adds Fashion-MNIST)
#   then, there:  tar -xJf bundle.tar.xz -C /tmp && DP_BUILD=/tmp/build-gpu bench/gpu.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build-gpu}" && pwd)
out=${2:-$root/.gpu/bundle.tar.xz}
mkdir -p "$(dirname "$out")"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dst="$stage/$(basename "$build")"
cd "$build"
find . -path ./meson-private -prune -o \( -type f -o -type l \) \( -perm -u+x -o -name '*.so*' \) ! -path '*.p/*' -print |
  while read -r f; do
    mkdir -p "$dst/$(dirname "$f")"
    cp -P "$f" "$dst/$f"
    [ -L "$f" ] || strip --strip-debug "$dst/$f" 2>/dev/null || true
  done
mkdir -p "$dst/runtime-libs"
# oneDNN and its OpenMP runtime (CPU products), Gloo (process groups) and ONNX (export), with what they load that such a
# machine may lack; the C and C++ runtimes and CUDA's libraries are its own.
for lib in $(ldd "$build/src/libdp.so" | awk '/libdnnl|libgomp|libgloo|libhiredis|libibverbs|libnl-|libonnx|libprotobuf/ {print $3}'); do
  cp -L "$lib" "$dst/runtime-libs/"
done
# docs/plugins.md's CUDA plugin, built here as the walk-through builds it (the GPU
# machine has no nvcc): gpu.sh stage 5 trains it on cuda:0 with the walk-through's line.
DP_DOC_KEEP="$dst/doc_plugin" python3 "$root/tests/plugins/check_doc.py" "$root/docs/plugins.md" "$build/src/cli/dp" \
  "$root/include" > /dev/null || echo "gpu_pack: the docs/plugins.md walk-through failed here; not packed" >&2
# DP_PACK_DATA=1: Fashion-MNIST too (30 MB, for gpu.sh's 5-epoch accuracy check).
if [ "${DP_PACK_DATA:-0}" = 1 ] && [ -d /usr/share/datasets/fashion-mnist ]; then
  mkdir -p "$dst/data" && cp -r /usr/share/datasets/fashion-mnist "$dst/data/"
fi
tar -C "$stage" -cJf "$out" "$(basename "$build")"
echo "$out: $(du -h "$out" | cut -f1)"
