#!/bin/bash
# SIGKILL one rank mid-allreduce; report how long the survivors take to error out.
# usage: kill_gloo.sh NP VICTIM TIMEOUT_MS
NP=${1:-2}; VICTIM=${2:-1}; TMO=${3:-10000}
cd "$(dirname "$0")"; rm -rf st_kill; mkdir st_kill
pids=()
for r in $(seq 0 $((NP-1))); do ./gloo_probe kill $r $NP st_kill $TMO & pids+=($!); done
sleep 1.5
t=$(date +%s.%N); kill -9 ${pids[$VICTIM]}; echo "killed rank $VICTIM at t=0"
for r in $(seq 0 $((NP-1))); do [ $r = $VICTIM ] && continue; wait ${pids[$r]}; rc=$?
  echo "rank $r exited rc=$rc at t=+$(echo "$(date +%s.%N) - $t" | bc)s"; done
