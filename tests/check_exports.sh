#!/bin/sh
# libdp.so exports only dp_* symbols (hidden visibility + libdp.map).
set -eu
lib="$1"
all=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sed 's/@.*//')
bad=$(printf '%s\n' "$all" | grep -v '^dp_' | grep -v '^DP_1$' || true)
count=$(printf '%s\n' "$all" | grep -c '^dp_' || true)
if [ -n "$bad" ]; then
  echo "symbols exported that are not dp_*:"; printf '%s\n' "$bad"; exit 1
fi
if [ "$count" -lt 20 ]; then echo "only $count dp_* symbols exported"; exit 1; fi
# Every function declared in dp.h is exported.
hdr="$2"
for f in $(grep -o 'dp_[a-z_0-9]*(' "$hdr" | tr -d '(' | sort -u); do
  printf '%s\n' "$all" | grep -qx "$f" || { echo "declared but not exported: $f"; exit 1; }
done
echo "1 passed, 0 failed ($count dp_* symbols, nothing else)"
