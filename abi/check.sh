#!/bin/sh
# The ABI check (test 'abi', suite unit): libdp.so must be compatible with the
# baseline of the current DP_ABI_VERSION, abi/libdp-<N>.abi. Additions pass;
# a removed function (abidiff's ABIDIFF_ABI_INCOMPATIBLE_CHANGE bit, 8), a
# changed signature, enum value or struct layout fails, unless DP_ABI_VERSION
# was bumped and a new baseline written with abi/update.sh in the same commit.
# The soname's version must be DP_ABI_VERSION too.
#   abi/check.sh path/to/libdp.so source-root
set -u
lib=$1
root=$2
version=$(sed -n 's/^#define DP_ABI_VERSION \([0-9][0-9]*\).*/\1/p' "$root/include/dp.h")
[ -n "$version" ] || { echo "no DP_ABI_VERSION in include/dp.h"; exit 1; }
base="$root/abi/libdp-$version.abi"
if [ ! -f "$base" ]; then
  echo "no ABI baseline for DP_ABI_VERSION $version ($base): after an incompatible change, run abi/update.sh"
  exit 1
fi
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" != "libdp.so.$version" ]; then
  echo "soname $soname, but DP_ABI_VERSION is $version (expected libdp.so.$version)"
  exit 1
fi
if ! grep -q "<function-decl name='dp_context_create'" "$base"; then
  echo "$base has no types (made from a libdp.so without debug information?)"; exit 1
fi
# abidiff sets its incompatible bit (8) only for removed functions; a changed
# signature, enum value or struct layout sets only the change bit (4). So a
# function counted as Changed (abidiff leaves out harmless changes, such as a
# new enumerator) fails too; Added ones pass.
report=$(abidiff --no-show-locs "$base" "$lib" 2>&1)
rc=$?
printf '%s\n' "$report"
if [ $((rc & 3)) -ne 0 ]; then
  echo "abidiff failed (exit status $rc)"; exit 1
fi
changed=$(printf '%s\n' "$report" | sed -n 's/^\(Functions\|Variables\) changes summary: [0-9]* Removed, \([0-9]*\) Changed.*/\2/p' |
  awk '{n += $1} END {print n + 0}')
if [ $((rc & 8)) -ne 0 ] || [ "$changed" -ne 0 ]; then
  echo "INCOMPATIBLE ABI change against $base (abidiff exit status $rc, $changed changed)."
  echo "Undo it; or, for an intended break, bump DP_ABI_VERSION in include/dp.h and run abi/update.sh;"
  echo "or, for a change that is compatible all the same (a field added at the end of a struct versioned"
  echo "by struct_size), run abi/update.sh; commit the baseline with the change (docs/install.md, \"ABI policy\")."
  exit 1
fi
if [ $((rc & 4)) -ne 0 ]; then
  echo "compatible ABI changes (additions) against $base: run abi/update.sh to record them"
else
  echo "ABI identical to $base"
fi
exit 0
