#!/bin/bash
# Run the same world twice; every rank prints an FNV hash of its all-reduced buffer.
NP=${1:-3}; cd "$(dirname "$0")"
for run in 1 2; do rm -rf st_det; mkdir st_det
  for r in $(seq 0 $((NP-1))); do ./gloo_probe det $r $NP st_det 20000 2>/dev/null & done; wait
done | sort
