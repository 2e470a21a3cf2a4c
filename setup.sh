#!/usr/bin/env bash
# Installs what dp needs from Debian's packages, builds it into ./build, and
# runs the main job. Until the trainer lands (`dp train`, Fashion-MNIST), the
# main job is examples/toy: the tutorial's DataParallel toy over all local CPUs.
#
#   ./setup.sh            install + build + run
#   ./setup.sh --deps     install only
set -euo pipefail
cd "$(dirname "$0")"

packages=(build-essential meson ninja-build pkg-config python3 nlohmann-json3-dev doctest-dev libcli11-dev libopenblas-dev
          zlib1g-dev dataset-fashion-mnist)
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

devices=$(seq -s, -f 'cpu:%g' 0 $(( $(nproc) - 1 )))
echo "== examples/toy over $devices"
build/examples/toy "$devices"
