#!/usr/bin/env python3
"""Training samples/s of a Python-driven loop (the dp binding: DataLoader with
2 workers + DataParallel.train_step) against `dp train` on the same model,
data, devices and batch size, side by side: interleaved rounds, medians, the
ratio Python / CLI (target >= 0.95). Both count loading and training time
from the first batch to the last step, as `dp train` reports it. The last
line is one JSON object.

    bench/python_vs_cli.py [--cli build/src/cli/dp] [--rounds 3] [--steps 400]
        [--model examples/fashion_mnist_mlp.json] [--devices cpu:0,cpu:1] [--batch-size 64]

Needs DP_LIBRARY (or a build tree at build/) and Debian's dataset-fashion-mnist.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, '..')
try:
    import dp
except ImportError:
    sys.path.insert(0, os.path.join(root, 'bindings', 'python'))
    import dp

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--cli', default=os.environ.get('DP_CLI', os.path.join(root, 'build', 'src', 'cli', 'dp')))
p.add_argument('--model', default=os.path.join(root, 'examples', 'fashion_mnist_mlp.json'))
p.add_argument('--devices', default='cpu:0,cpu:1')
p.add_argument('--batch-size', type=int, default=64)
p.add_argument('--steps', type=int, default=400)
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--workers', type=int, default=2)
args = p.parse_args()
OPT = {'type': 'sgd', 'lr': 0.05, 'momentum': 0.9}  # dp train's default optimizer


def cli_run():
    out = subprocess.run([args.cli, 'train', args.model, '--data', 'fashion-mnist', '--devices', args.devices,
                          '--batch-size', str(args.batch_size), '--max-steps', str(args.steps),
                          '--workers', str(args.workers), '--optimizer', json.dumps(OPT)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])['samples_per_second']


train_data = dp.FashionMNIST(train=True)  # read once, as each CLI run reads it once (not timed there either)


def python_run():
    model = dp.DataParallel(dp.Model(args.model), args.devices)
    optimizer = dp.Optimizer(model, OPT)
    loader = dp.DataLoader(train_data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    samples, steps, start = 0, 0, time.perf_counter()
    while steps < args.steps:
        for x, y in loader:
            model.train_step(optimizer, x, y)
            samples += len(y)
            steps += 1
            if steps == args.steps:
                break
    seconds = time.perf_counter() - start
    loader.close()
    return samples / seconds


rates = {'python': [], 'cli': []}
for r in range(args.rounds):
    for name, fn in (('cli', cli_run), ('python', python_run)) if r % 2 == 0 else (('python', python_run), ('cli', cli_run)):
        rates[name].append(fn())
py, cli = statistics.median(rates['python']), statistics.median(rates['cli'])
print(f'{os.path.basename(args.model)}, {args.devices}, batch {args.batch_size}, {args.steps} steps, '
      f'{args.workers} loader workers; {args.rounds} interleaved rounds, medians (samples/s)')
print(f'{"python loop":>12} {"dp train":>12} {"ratio":>7}')
print(f'{py:12.0f} {cli:12.0f} {py / cli:6.3f}x')
print(json.dumps({'python_samples_per_second': round(py, 1), 'cli_samples_per_second': round(cli, 1),
                  'ratio': round(py / cli, 3), 'rounds': {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
                  'model': os.path.basename(args.model), 'devices': args.devices, 'batch_size': args.batch_size,
                  'steps': args.steps}))
