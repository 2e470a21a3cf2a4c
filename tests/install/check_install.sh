#!/bin/sh
# Installs the current build into a temporary directory (meson install
# --no-rebuild --destdir: a copy, no root, a second or two), then builds and
# runs programs against the installed copy alone, found with pkg-config:
# tests/test_c_api.c (C99) and use_dp.cpp (dp.hpp, loading an installed plugin).
#   check_install.sh MESON BUILD_ROOT SOURCE_ROOT CC CXX
set -eu
meson=$1 build=$2 src=$3 cc=$4 cxx=$5
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dp-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest="$tmp/root"

$meson install -C "$build" --no-rebuild --skip-subprojects --quiet --destdir "$dest" > "$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "meson install failed"; exit 1; }

pc=$(find "$dest" -name dp.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || { echo "no dp.pc installed"; exit 1; }
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")
# Only the installed dp.pc, with its paths moved under the destdir.
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_LIBDIR="$pcdir" PKG_CONFIG_SYSROOT_DIR="$dest"
flags=$(pkg-config --cflags --libs dp)
echo "pkg-config --cflags --libs dp: $flags"
# pkgconf puts the sysroot in front of a path variable; pkg-config 0.29 does not.
includedir=$(pkg-config --variable=includedir dp)
case "$includedir" in "$dest"/*) ;; *) includedir="$dest$includedir" ;; esac
plugindir="$libdir/dp/plugins"
[ "$(pkg-config --variable=plugindir dp)" = "$(pkg-config --variable=libdir dp)/dp/plugins" ] &&
  [ -d "$plugindir" ] ||
  { echo "plugindir: $(pkg-config --variable=plugindir dp)"; exit 1; }

fail=0
for f in "$includedir/dp.h" "$includedir/dp_plugin.h" "$includedir/dp.hpp" "$libdir/libdp.so" "$libdir/libdp.so.1" \
         "$plugindir/swish.so" "$plugindir/rms_norm.so" "$plugindir/shape_probe.so"; do
  [ -e "$f" ] || { echo "not installed: ${f#$dest}"; fail=1; }
done
[ $fail -eq 0 ] || exit 1
soname=$(readelf -d "$libdir/libdp.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libdp.so.1" ] || { echo "soname: $soname"; exit 1; }

# tests/test_c_api.c, as any C99 program would build against the installed dp.
# shellcheck disable=SC2086
$cc -std=c99 -Wall -Wextra -pedantic -Werror -o "$tmp/test_c_api" "$src/tests/test_c_api.c" $flags -lm
# The installed libdp.so, not the build's, must be the one loaded.
LD_LIBRARY_PATH="$libdir" ldd "$tmp/test_c_api" | grep -q "$libdir/libdp.so.1" ||
  { LD_LIBRARY_PATH="$libdir" ldd "$tmp/test_c_api"; echo "the installed libdp.so is not the one loaded"; exit 1; }
LD_LIBRARY_PATH="$libdir" "$tmp/test_c_api"

# shellcheck disable=SC2086
$cxx -std=c++17 -Wall -Wextra -Wpedantic -Werror -o "$tmp/use_dp" "$src/tests/install/use_dp.cpp" $flags
# DP_PLUGIN_PATH unset: bare plugin names must be found in the installed plugindir.
env -u DP_PLUGIN_PATH LD_LIBRARY_PATH="$libdir" "$tmp/use_dp" "$plugindir"
echo "installed copy OK"
