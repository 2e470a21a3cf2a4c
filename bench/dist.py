#!/usr/bin/env python3
"""Processes against threads: `dp bench` on 2 processes x 1 CPU device (a
process group over loopback, Gloo) beside 1 process x 2 CPU devices, on the
Fashion-MNIST MLP and CNN, in interleaved rounds; the ratio of their
samples/s, and the fraction of the processes' step time spent in collectives
and waiting on them (dp_group_comm_seconds). Then Gloo's all-reduce beside
memcpy (build/bench/dist_allreduce). Prints the machine (CPU, cores,
oneDNN instruction set) first: ratios are only comparable on one machine.

    bench/dist.py [--build build] [--rounds 3] [--steps 40] [--models MLP,CNN]
                  [--variant NAME:VAR=VALUE,...]...

Each --variant runs the 2 processes again with those environment variables
(DP_BUCKET_MB, DP_SPLIT_LAYERS, ...), beside a 1-process run of its own in the
same round: settings compared side by side in one run. A variant with
DP_BACKEND=mpi starts its processes with mpirun (Open MPI's collectives), and
the all-reduce table is then printed for it too.
"""
import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [('MLP', 'examples/fashion_mnist_mlp.json', 256), ('CNN', 'examples/fashion_mnist_cnn.json', 64)]


def free_port():
    while True:
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(('127.0.0.1', port))
                return port
            except OSError:
                pass


def machine(dp_exe):
    """`dp devices`' line for cpu:0: the processor, oneDNN's version and the instruction set its products run."""
    out = subprocess.run([dp_exe, 'devices'], capture_output=True, text=True).stdout
    cpu = next((l.split(' of ', 1)[-1] for l in out.splitlines() if l.startswith('cpu:0: ')), '?')
    return f'{cpu}, {os.cpu_count()} cores (ONEDNN_MAX_CPU_ISA={os.environ.get("ONEDNN_MAX_CPU_ISA", "(unset)")})'


def bench_one(dp_exe, model, batch, steps):
    r = subprocess.run([dp_exe, 'bench', model, '--devices', 'cpu:0,cpu:1', '--batch-size', str(batch),
                        '--steps', str(steps)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if r.returncode != 0:
        sys.exit(f'dp bench failed: {r.stderr}')
    return json.loads(r.stdout.strip().splitlines()[-1])


def bench_two(dp_exe, model, batch, steps, extra_env):
    port = free_port()
    if extra_env.get('DP_BACKEND') == 'mpi':
        # Open MPI's launcher: rank and size from its environment, buckets through shared memory.
        env = dict(os.environ, MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), OMPI_ALLOW_RUN_AS_ROOT='1',
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1', **extra_env)
        exports = [a for k in ['MASTER_ADDR', 'MASTER_PORT'] + list(extra_env) for a in ('-x', k)]
        r = subprocess.run(['mpirun', '-np', '2', '--oversubscribe', '--bind-to', 'none', *exports, dp_exe, 'bench',
                            model, '--devices', 'cpu:0', '--batch-size', str(batch), '--steps', str(steps)],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        if r.returncode != 0:
            sys.exit(f'dp bench (2 processes, mpirun) failed: {r.stderr}')
        return json.loads([line for line in r.stdout.splitlines() if line.startswith('{')][0])
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE='2', MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port),
                   **extra_env)
        procs.append(subprocess.Popen([dp_exe, 'bench', model, '--devices', 'cpu:0', '--batch-size', str(batch),
                                       '--steps', str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=ROOT, env=env))
    outs = [p.communicate(timeout=600) for p in procs]
    if any(p.returncode for p in procs):
        sys.exit(f'dp bench (2 processes) failed: {outs[0][1]} {outs[1][1]}')
    return json.loads(outs[0][0].strip().splitlines()[-1])


def variant(text):
    name, _, assignments = text.partition(':')
    env = dict(a.split('=', 1) for a in assignments.split(',') if a)
    return name, env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--steps', type=int, default=40)
    ap.add_argument('--models', default=','.join(m[0] for m in MODELS))
    ap.add_argument('--variant', type=variant, action='append', default=[])
    args = ap.parse_args()
    variants = [('', {})] + args.variant
    dp_exe = os.path.join(args.build, 'src', 'cli', 'dp')
    print(f'machine: {machine(dp_exe)}')
    print(f'{args.rounds} interleaved rounds of {args.steps} steps; medians\n')
    print('| model | batch | 1 process × 2 devices | 2 processes × 1 device | ratio (range) | in collectives | waiting on them |')
    print('|---|---:|---:|---:|---:|---:|---:|')
    for name, model, batch in MODELS:
        if name not in args.models.split(','):
            continue
        runs = {v: ([], [], [], []) for v, _ in variants}  # one, two, busy, wait
        for k in range(args.rounds):
            for v, env in variants:
                one, two, busy, wait = runs[v]
                for which in ([0, 1] if k % 2 == 0 else [1, 0]):
                    if which == 0:
                        one.append(bench_one(dp_exe, model, batch, args.steps)['samples_per_second'])
                    else:
                        r = bench_two(dp_exe, model, batch, args.steps, env)
                        two.append(r['samples_per_second'])
                        busy.append(r['comm_busy_fraction'])
                        wait.append(r['comm_wait_fraction'])
        for v, env in variants:
            one, two, busy, wait = runs[v]
            # The ratio of each round's pair (run back to back), then their median: the
            # machine's speed drifts between rounds more than within one.
            ratios = sorted(t / o for o, t in zip(one, two))
            a, b = statistics.median(one), statistics.median(two)
            label = name + (f' ({v}: {" ".join(f"{x}={y}" for x, y in env.items())})' if v else '')
            print(f'| {label} | {batch} | {a:,.0f} | {b:,.0f} | **{statistics.median(ratios):.2f}×** '
                  f'({ratios[0]:.2f}–{ratios[-1]:.2f}) | {statistics.median(busy):.0%} | {statistics.median(wait):.0%} |')
    print('\n(samples/s, medians; ratio: the median of the rounds\' ratios, each of two runs back to back, and their'
          ' range; "in collectives": the share of a process\'s step time inside all-reduces across processes; "waiting": the'
          ' share it waited for them after its own backward had finished)\n')
    allreduce = os.path.join(args.build, 'bench', 'dist_allreduce')
    if os.path.exists(allreduce):
        sys.stdout.flush()
        subprocess.run([allreduce, '2'], check=True)
        if any(env.get('DP_BACKEND') == 'mpi' for _, env in variants):
            print()
            sys.stdout.flush()
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1', DP_BACKEND='mpi',
                       MASTER_PORT=str(free_port()))
            subprocess.run(['mpirun', '-np', '2', '--oversubscribe', '--bind-to', 'none', '-x', 'DP_BACKEND', '-x',
                            'MASTER_PORT', allreduce], check=True, env=env)


if __name__ == '__main__':
    main()
