#!/bin/sh
# Plugins link nothing from libdp: no dp_* symbol is undefined in them, they
# need no libdp.so, and each exports dp_plugin_init (except the fixture that
# must not).
set -eu
n=0
for p in "$@"; do
  bad=$(nm -D --undefined-only "$p" | awk '{print $NF}' | grep '^dp_' || true)
  [ -z "$bad" ] || { echo "$p needs libdp symbols: $bad"; exit 1; }
  if readelf -d "$p" | grep -q 'libdp\.so'; then echo "$p links libdp"; exit 1; fi
  case "$p" in
    *no_init*) ;;
    *) nm -D --defined-only "$p" | grep -q ' dp_plugin_init$' || { echo "$p does not export dp_plugin_init"; exit 1; } ;;
  esac
  n=$((n + 1))
done
echo "$n passed, 0 failed (no dp_* undefined, libdp not needed)"
