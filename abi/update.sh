#!/bin/sh
# Regenerates the ABI baseline abi/libdp-<DP_ABI_VERSION>.abi from a built
# libdp.so (default: build/src/libdp.so). Run it, and commit the result, when
# functions were added to dp.h (a compatible change: the check passes without
# it, but the baseline should then cover them), or together with a bump of
# DP_ABI_VERSION for an incompatible change (docs/install.md, "ABI policy").
#   abi/update.sh [path/to/libdp.so]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
lib=${1:-$root/build/src/libdp.so}
[ -f "$lib" ] || { echo "abi/update.sh: no $lib: build first (meson setup build && ninja -C build)" >&2; exit 1; }
version=$(sed -n 's/^#define DP_ABI_VERSION \([0-9][0-9]*\).*/\1/p' "$root/include/dp.h")
[ -n "$version" ] || { echo "abi/update.sh: no DP_ABI_VERSION in include/dp.h" >&2; exit 1; }
out="$root/abi/libdp-$version.abi"
# The exported dp_* functions and the types of include/ they use (the handles
# stay opaque), without file paths or build directories, so the file is the
# same whatever the checkout's path. abidw reads the DWARF of src/capi (always
# built with -g, src/meson.build).
abidw --no-show-locs --no-comp-dir-path --no-corpus-path --drop-undefined-syms --exported-interfaces-only --drop-private-types \
  --headers-dir "$root/include" --out-file "$out.tmp" "$lib"
if ! grep -q "<function-decl name='dp_context_create'" "$out.tmp"; then
  rm -f "$out.tmp"
  echo "abi/update.sh: $lib has no debug information for dp_context_create: is src/capi built with -g?" >&2
  exit 1
fi
mv "$out.tmp" "$out"
echo "wrote $out (DP_ABI_VERSION $version, $(grep -c '<elf-symbol ' "$out") symbols)"
