#!/bin/bash
# Interleaved rounds: Gloo (TCP loopback), Open MPI vader (shared memory), Open MPI btl tcp (loopback).
# Each program prints the median of 7 timed batches per size; this script repeats ROUNDS times.
ROUNDS=${1:-5}; cd "$(dirname "$0")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LO="--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
for r in $(seq $ROUNDS); do
  echo "# round $r $(uptime)"
  rm -rf st_bench; mkdir st_bench
  ./gloo_probe bench 0 2 st_bench 60000 2>/dev/null & ./gloo_probe bench 1 2 st_bench 60000 2>/dev/null; wait
  mpirun --allow-run-as-root --oversubscribe -np 2 $LO --mca btl vader,self ./mpi_probe bench | sed 's/^mpi/mpi-vader/'
  mpirun --allow-run-as-root --oversubscribe -np 2 $LO --mca btl tcp,self ./mpi_probe bench | sed 's/^mpi/mpi-tcp/'
done
