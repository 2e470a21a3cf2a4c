#!/usr/bin/env bash
# Installs what dp needs from Debian's packages, builds it into ./build, and
# runs the main job: train examples/fashion_mnist_mlp.json on Fashion-MNIST
# over all local devices (one CPU device per core).
#
#   ./setup.sh            install + build + train
#   ./setup.sh --deps     install only
#   ./setup.sh --deps --fuzz   install only, with clang's libFuzzer (tests/fuzz; CI)
#   ./setup.sh --toy      install + build + the tutorial's DataParallel toy
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential meson ninja-build pkg-config python3 nlohmann-json3-dev doctest-dev libcli11-dev libdnnl-dev
          zlib1g-dev dataset-fashion-mnist python3-numpy python3-pytest abigail-tools libgloo-dev openmpi-bin libopenmpi-dev
          librsvg2-bin fonts-dejavu-core
          libonnx-dev libprotobuf-dev)
[ "${2:-}" = "--fuzz" ] && packages+=(clang libclang-rt-dev python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "${1:-}" = "--deps" ] && exit 0

[ -d build ] || meson setup build
ninja -C build

if [ "${1:-}" = "--toy" ]; then
  build/examples/toy "$(seq -s, -f 'cpu:%g' 0 $(( $(nproc) - 1 )))"
  exit 0
fi
build/src/cli/dp train examples/fashion_mnist_mlp.json --data fashion-mnist --devices auto --epochs 5 \
  --batch-size 64 --optimizer '{"type": "adam", "lr": 0.001}' --lr-schedule cosine
