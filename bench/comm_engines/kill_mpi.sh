#!/bin/bash
# SIGKILL one rank of an mpirun job mid-MPI_Allreduce; time until mpirun (and survivors) exit.
# usage: kill_mpi.sh NP VICTIM [extra mpirun args...]
NP=${1:-2}; VICTIM=${2:-1}; shift 2
cd "$(dirname "$0")"; export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --allow-run-as-root --oversubscribe -np $NP "$@" ./mpi_probe kill > kill_mpi.out 2>&1 &
MP=$!
for i in $(seq 50); do grep -q "rank $VICTIM pid" kill_mpi.out 2>/dev/null && grep -q 'first iter ok' kill_mpi.out && break; sleep 0.1; done
sleep 1
VPID=$(grep "rank $VICTIM pid" kill_mpi.out | awk '{print $4}')
t=$(date +%s.%N); kill -9 $VPID; echo "killed rank $VICTIM (pid $VPID) at t=0"
timeout ${WAIT:-120} tail -s 0.02 --pid=$MP -f /dev/null; echo "mpirun exited at t=+$(echo "$(date +%s.%N) - $t" | bc)s"
wait $MP; echo "mpirun rc=$?"; ps -ef | grep '[m]pi_probe' || echo "no mpi_probe left"
grep -v '^ *$' kill_mpi.out | tail -25
