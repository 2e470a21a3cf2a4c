#!/usr/bin/env python3
"""The `dp` command: exit codes, messages, outputs, Ctrl-C, and exact resume.

    check_cli.py BUILD/src/cli/dp BUILD/plugins/swish.so
"""
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time

DP = os.path.abspath(sys.argv[1])
SWISH = os.path.abspath(sys.argv[2])
passed = failed = 0


def expect(cond, what, detail=''):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print(f'FAILED: {what}\n{detail}')


def run(*args, timeout=300):
    return subprocess.run([DP, *args], capture_output=True, text=True, timeout=timeout)


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def safetensors_tensors(path):
    """name -> raw bytes, read per the format, for bitwise comparison."""
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in header.items() if k != '__metadata__'}


MLP = {"seed": 3, "input": {"shape": [8]},
       "layers": [{"type": "linear", "out_features": 32}, {"type": "relu"}, {"type": "dropout", "p": 0.1},
                  {"type": "batch_norm"}, {"type": "linear", "out_features": 4}],
       "loss": {"type": "cross_entropy"}}

with tempfile.TemporaryDirectory() as tmp:
    os.chdir(tmp)
    with open('mlp.json', 'w') as f:
        json.dump(MLP, f)
    with open('bad.json', 'w') as f:
        f.write('{"input": {"shape": [8]}, "layers": [{"type": "linear", "out_features": -3}]}')

    # Usage and bad input: exit 2 with the reason on stderr.
    r = run()
    expect(r.returncode == 2, 'no subcommand exits 2', r.stderr)
    r = run('--version')
    expect(r.returncode == 0 and '0.1.0' in r.stdout, '--version', r.stdout + r.stderr)
    r = run('train', 'missing.json')
    expect(r.returncode == 2 and 'missing.json' in r.stderr, 'missing model file exits 2', r.stderr)
    r = run('train', 'bad.json', '--data', 'synthetic:64')
    expect(r.returncode == 2 and '/layers/0/out_features' in r.stderr, 'bad model exits 2 naming the JSON path', r.stderr)
    r = run('train', 'mlp.json', '--data', 'synthetic:1')
    expect(r.returncode == 2 and 'synthetic:N' in r.stderr, 'bad --data exits 2', r.stderr)
    r = run('train', 'mlp.json', '--data', 'cifar10:/nonexistent')
    expect(r.returncode == 2 and '/nonexistent/data_batch_1.bin' in r.stderr, 'missing data files exit 2 naming the file', r.stderr)
    r = run('train', 'mlp.json', '--data', 'synthetic:64', '--devices', 'gpu:0')
    expect(r.returncode == 2 and "'gpu:0'" in r.stderr, 'bad --devices exits 2', r.stderr)
    r = run('train', 'mlp.json', '--data', 'synthetic:64', '--optimizer', '{"type": "sgd", "lr": -1}')
    expect(r.returncode == 2 and '/lr' in r.stderr, 'bad --optimizer exits 2', r.stderr)
    r = run('train', 'mlp.json', '--epochs', '0')
    expect(r.returncode == 2, '--epochs 0 exits 2', r.stderr)
    r = run('devices')
    expect(r.returncode == 0 and 'cpu:0' in r.stdout, 'dp devices', r.stdout)

    # Sizes: a model beyond --memory-limit is refused before allocation.
    r = run('train', 'mlp.json', '--data', 'synthetic:64', '--memory-limit', '1kB')
    expect(r.returncode != 0 and 'DP_CONTEXT_MEMORY_LIMIT' in r.stderr and '1.0 kB' in r.stderr, '--memory-limit refuses', r.stderr)
    # A model file loads no plugin library by path unless allowed.
    with open('plug.json', 'w') as f:
        json.dump(dict(MLP, plugins=[SWISH], layers=MLP['layers'][:1] + [{"type": "swish"}] + MLP['layers'][1:]), f)
    r = run('train', 'plug.json', '--data', 'synthetic:64', '--max-steps', '1', '--workers', '0')
    expect(r.returncode == 2 and '--allow-model-plugins' in r.stderr, 'a plugin path in a model is refused', r.stderr)
    r = run('train', 'plug.json', '--data', 'synthetic:64', '--max-steps', '1', '--workers', '0', '--allow-model-plugins')
    expect(r.returncode == 0, '--allow-model-plugins loads it', r.stderr)
    r = run('train', 'plug.json', '--data', 'synthetic:64', '--max-steps', '1', '--workers', '0', '--plugin', SWISH)
    expect(r.returncode == 0, '--plugin loads it first: the model may name it', r.stderr)

    # Training: progress on stderr, one JSON object as the last stdout line, log, plot, checkpoint.
    common = ['--data', 'synthetic:2048', '--batch-size', '64', '--devices', 'cpu:0,cpu:1', '--workers', '1',
              '--optimizer', '{"type": "adam", "lr": 0.01}']
    r = run('train', 'mlp.json', *common, '--epochs', '2', '--save', 'a.ckpt', '--log', 'm.jsonl', '--plot', 'c.svg')
    expect(r.returncode == 0, 'train exits 0', r.stderr)
    out = last_json(r.stdout)
    for key in ['test_accuracy', 'train_loss', 'epochs', 'samples_per_second', 'seconds', 'devices']:
        expect(key in out, f'final JSON has {key}', r.stdout)
    expect(out['epochs'] == 2 and out['devices'] == 2, 'final JSON values', r.stdout)
    expect(out['test_accuracy'] > 0.6, 'learns the synthetic task (chance is 0.25)', r.stdout)
    expect('epoch 2/2' in r.stderr, 'progress on stderr', r.stderr)
    lines = open('m.jsonl').read().splitlines()
    expect(len(lines) == 2 and json.loads(lines[1])['epoch'] == 2, 'one log line per epoch', '\n'.join(lines))
    expect(open('c.svg').read().startswith('<svg'), '--plot writes an SVG')

    # Exact resume: 1 epoch, then resume to 2 == 2 epochs straight, bit for bit.
    r1 = run('train', 'mlp.json', *common, '--epochs', '1', '--save', 'b.ckpt')
    r2 = run('train', 'mlp.json', *common, '--epochs', '2', '--resume', 'b.ckpt', '--save', 'b.ckpt')
    expect(r1.returncode == 0 and r2.returncode == 0, 'interrupted and resumed runs exit 0', r1.stderr + r2.stderr)
    a, b = safetensors_tensors('a.ckpt'), safetensors_tensors('b.ckpt')
    expect(a.keys() == b.keys() and all(a[k] == b[k] for k in a), 'resumed run is bitwise equal to the straight run',
           str([k for k in a if a.get(k) != b.get(k)][:5]))

    # Evaluation of the checkpoint gives the training run's final test accuracy.
    r = run('eval', 'mlp.json', 'a.ckpt', '--data', 'synthetic:2048', '--devices', 'cpu:0')
    expect(r.returncode == 0 and abs(last_json(r.stdout)['test_accuracy'] - out['test_accuracy']) < 1e-6,
           'eval reproduces the final accuracy', r.stdout + r.stderr)
    r = run('eval', 'mlp.json', 'mlp.json', '--data', 'synthetic:64')
    expect(r.returncode == 2, 'eval of a non-checkpoint exits 2', r.stderr)

    # --lr-schedule takes a schedule's JSON; a bad one exits 2 naming the key.
    r = run('train', 'mlp.json', *common, '--epochs', '1', '--lr-schedule',
            '{"type": "cosine_warmup", "warmup_steps": 5, "total_steps": 32}')
    expect(r.returncode == 0, '--lr-schedule JSON trains', r.stderr)
    r = run('train', 'mlp.json', *common, '--epochs', '1', '--lr-schedule', '{"type": "step"}')
    expect(r.returncode == 2 and '/step_size' in r.stderr, 'a bad --lr-schedule exits 2 naming the key', r.stderr)

    # --max-steps stops early (benchmarks), exit 0, no epoch completed.
    r = run('train', 'mlp.json', *common, '--epochs', '3', '--max-steps', '5')
    expect(r.returncode == 0 and last_json(r.stdout)['epochs'] == 0 and 'max-steps' in r.stderr, '--max-steps',
           r.stdout + r.stderr)

    # Benchmark.
    r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--batch-size', '32', '--steps', '5')
    expect(r.returncode == 0 and last_json(r.stdout)['samples_per_second'] > 0, 'bench prints samples/s', r.stdout + r.stderr)

    # Ctrl-C: stops after the current step, writes the checkpoint, exits 130.
    p = subprocess.Popen([DP, 'train', 'mlp.json', *common, '--epochs', '1000', '--save', 'c.ckpt'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    p.send_signal(signal.SIGINT)
    so, se = p.communicate(timeout=60)
    expect(p.returncode == 130, 'Ctrl-C exits 130', se)
    expect(os.path.exists('c.ckpt') and last_json(so)['interrupted'] is True, 'Ctrl-C writes the checkpoint', so + se)
    expect(not [f for f in os.listdir('.') if '.tmp' in f], 'no temporary files left', str(os.listdir('.')))

print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
