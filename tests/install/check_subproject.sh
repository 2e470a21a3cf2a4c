#!/bin/sh
# dp as a meson subproject: tests/install/subproject/ (a project calling
# subproject('dp') and dependency('dp')) with dp's source tree linked in as
# subprojects/dp, configured in a temporary directory.
#   check_subproject.sh MESON SOURCE_ROOT quick|full
# quick (suite unit, ~10 s): configure, check that app links dp's libdp.so, and
#   compile app.c and app.cpp against the subproject's include directories.
# full (suite slow, 3-4 min on 2 cores: it builds libdp): build and run both.
set -eu
meson=$1 src=$2 mode=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dp-subproject.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp -R "$src/tests/install/subproject" "$tmp/proj"
mkdir "$tmp/proj/subprojects"
ln -s "$src" "$tmp/proj/subprojects/dp"
$meson setup "$tmp/build" "$tmp/proj" > "$tmp/setup.log" 2>&1 || { cat "$tmp/setup.log"; exit 1; }
grep -q "Subproject dp finished" "$tmp/setup.log" || { cat "$tmp/setup.log"; echo "dp was not configured as a subproject"; exit 1; }
if [ "$mode" = quick ]; then
  # app's link step takes subprojects/dp's libdp.so.
  ninja -C "$tmp/build" -t query app | grep -q 'subprojects/dp/src/libdp.so' ||
    { ninja -C "$tmp/build" -t query app; echo "app does not link dp's libdp.so"; exit 1; }
  # Compile (not link) the programs: the dependency's include directories work.
  ninja -C "$tmp/build" app.p/app.c.o app_cpp.p/app.cpp.o > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
  echo "subproject configured; app.c and app.cpp compile against dependency('dp')"
else
  ninja -C "$tmp/build" -j "${DP_JOBS:-2}" app app_cpp > "$tmp/build.log" 2>&1 || { tail -n 40 "$tmp/build.log"; exit 1; }
  "$tmp/build/app"
  "$tmp/build/app_cpp"
fi
