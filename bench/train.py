#!/usr/bin/env python3
"""End-to-end training samples/s (loader with 2 workers + training step) of the
Fashion-MNIST MLP and CNN on 1 and 2 CPU devices, side by side: `dp train
--max-steps` on the real data (Debian's dataset-fashion-mnist), interleaved
rounds, medians and ratios. The last line is one JSON object.

    python3 bench/train.py [build/src/cli/dp] [rounds]
"""
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
dp = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, '..', 'build', 'src', 'cli', 'dp')
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
# model file, batch size, steps per measurement (a few seconds each)
models = {'mlp': ('fashion_mnist_mlp.json', 64, 400), 'cnn': ('fashion_mnist_cnn.json', 64, 40)}
configs = [('1 device', 'cpu:0'), ('2 devices', 'cpu:0,cpu:1')]
rates = {(m, c): [] for m in models for c, _ in configs}
for _ in range(rounds):
    for m, (path, batch, steps) in models.items():
        for label, devices in configs:
            out = subprocess.run([dp, 'train', os.path.join(here, '..', 'examples', path), '--data', 'fashion-mnist',
                                  '--devices', devices, '--batch-size', str(batch), '--max-steps', str(steps),
                                  '--workers', '2'],
                                 capture_output=True, text=True, check=True).stdout
            rates[(m, label)].append(json.loads(out.strip().splitlines()[-1])['samples_per_second'])
cpu = next((l.split(' of ', 1)[-1] for l in subprocess.run([dp, 'devices'], capture_output=True, text=True).stdout
            .splitlines() if l.startswith('cpu:0: ')), '?')
print(f'{cpu} (ONEDNN_MAX_CPU_ISA={os.environ.get("ONEDNN_MAX_CPU_ISA", "(unset)")}); {rounds} interleaved rounds, '
      'medians; loader (2 workers) + training step')
print(f'{"model":6} {"batch":>5} {"1 device":>12} {"2 devices":>12} {"ratio":>7}')
result = {}
for m, (path, batch, _) in models.items():
    one, two = (statistics.median(rates[(m, c)]) for c, _ in configs)
    print(f'{m:6} {batch:5d} {one:12.0f} {two:12.0f} {two / one:6.2f}x')
    result[m] = {'one_device': round(one, 1), 'two_devices': round(two, 1), 'ratio': round(two / one, 3)}
print(json.dumps(result))
