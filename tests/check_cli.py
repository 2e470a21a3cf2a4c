#!/usr/bin/env python3
"""The `dp` command: exit codes, messages, outputs, Ctrl-C, and exact resume.

    check_cli.py BUILD/src/cli/dp BUILD/plugins/swish.so
"""
import gzip
import json
import math
import os
import re
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


def run(*args, timeout=300, env=None):
    return subprocess.run([DP, *args], capture_output=True, text=True, timeout=timeout, env=env)


def last_json(out):
    return json.loads(out.strip().splitlines()[-1])


def open_header(path):
    with open(path, 'rb') as f:
        return json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))


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
    # A count past int64 was a raw std::vector message; one past the machine's memory "dp: std::bad_alloc".
    r = run('train', 'mlp.json', '--data', 'synthetic:99999999999999999999', '--max-steps', '1')
    expect(r.returncode == 2 and "synthetic:N needs a sample count N in [2, 2^63 - 1], got '99999999999999999999'" in r.stderr,
           'a synthetic count past int64 exits 2 naming --data', r.stderr)
    r = run('train', 'mlp.json', '--data', 'synthetic:10000000000000', '--max-steps', '1')
    expect(r.returncode == 1 and "--data: 10000000000000 synthetic samples of" in r.stderr and
           "more than this machine's memory" in r.stderr and 'bad_alloc' not in r.stderr,
           'a synthetic set larger than the machine exits 1 naming --data and the bytes', r.stderr)
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
    cpu = next((l for l in r.stdout.splitlines() if l.startswith('cpu:0: CPU core 0 of ')), '')
    expect(re.search(r', oneDNN \d+\.\d+\.\d+ sgemm, \w+$', cpu), 'dp devices names the CPU, oneDNN and its instruction set',
           r.stdout)
    r = run('devices', env=dict(os.environ, ONEDNN_MAX_CPU_ISA='AVX2'))
    expect(r.returncode == 0 and 'avx512' not in r.stdout and ' sgemm, ' in r.stdout,
           'a cap set by ONEDNN_MAX_CPU_ISA is what dp devices names', r.stdout)

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
    expect('note: resumed' not in r2.stderr, 'more epochs under a constant lr: no note', r2.stderr)
    # Resumed inside an epoch: its train_loss is the whole epoch's mean (it was the steps' after the resume).
    r1 = run('train', 'mlp.json', *common, '--epochs', '2', '--max-steps', '45', '--save', 'mid.ckpt')
    r2 = run('train', 'mlp.json', *common, '--epochs', '2', '--resume', 'mid.ckpt')
    expect(r1.returncode == 0 and r2.returncode == 0 and last_json(r2.stdout)['train_loss'] == out['train_loss'],
           'resumed mid-epoch: the final train_loss is the straight run\'s', r1.stderr + r2.stdout + r.stdout)
    # Stopped after an epoch's last batch (32 batches an epoch), before its evaluation: the resumed
    # run ends that epoch first (its log line and figures as the straight run's), then goes on.
    r1 = run('train', 'mlp.json', *common, '--epochs', '2', '--max-steps', '32', '--save', 'end.ckpt')
    r2 = run('train', 'mlp.json', *common, '--epochs', '2', '--resume', 'end.ckpt', '--save', 'end.ckpt',
             '--log', 'end.jsonl')
    ended = [json.loads(line) for line in open('end.jsonl')] if r2.returncode == 0 else []
    straight = [json.loads(line) for line in lines]
    same = lambda a, b: {k: v for k, v in a.items() if k != 'samples_per_second'} == \
        {k: v for k, v in b.items() if k != 'samples_per_second'}
    expect(r1.returncode == 0 and '32 batches per epoch' in r1.stderr and len(ended) == 2 and
           all(same(e, s) for e, s in zip(ended, straight)) and 'epoch 1/2: train loss' in r2.stderr,
           'resumed after an epoch\'s last batch: that epoch ends in the resumed run, as in the straight one',
           r1.stderr + r2.stderr + str(ended) + str(straight))
    c, e = safetensors_tensors('a.ckpt'), safetensors_tensors('end.ckpt')
    expect(c.keys() == e.keys() and all(c[k] == e[k] for k in c), 'and is bitwise the straight run at its end')
    # --log's lr is the one each line's last step used (cosine over the run's 64 steps: PyTorch's
    # CosineAnnealingLR); a run resumed after an epoch's last batch logs that epoch's lr too.
    r1 = run('train', 'mlp.json', *common, '--epochs', '2', '--lr-schedule', 'cosine', '--log', 'cs.jsonl')
    r2 = run('train', 'mlp.json', *common, '--epochs', '2', '--lr-schedule', 'cosine', '--max-steps', '32',
             '--save', 'cs.ckpt')
    r3 = run('train', 'mlp.json', *common, '--epochs', '2', '--lr-schedule', 'cosine', '--resume', 'cs.ckpt',
             '--log', 'cs2.jsonl')
    ok = r1.returncode == 0 and r2.returncode == 0 and r3.returncode == 0
    got = [json.loads(line)['lr'] for line in open('cs.jsonl')] if ok else []
    want = [0.01 * (1 + math.cos(math.pi * (step - 1) / 64)) / 2 for step in (32, 64)]
    expect(len(got) == 2 and all(abs(g - w) <= 1e-7 * w for g, w in zip(got, want)),
           f'--log: each line\'s lr is its last step\'s ({got} vs {want})', r1.stderr + r2.stderr + r3.stderr)
    resumed = [json.loads(line)['lr'] for line in open('cs2.jsonl')] if ok else []
    expect(resumed == got, f'--log: the resumed run logs the straight run\'s lrs ({resumed} vs {got})')
    # The cosine schedule spans --epochs: resuming with others changes its course, and says so.
    r1 = run('train', 'mlp.json', *common, '--epochs', '1', '--lr-schedule', 'cosine', '--save', 'cos.ckpt')
    half = [('32' if a == '64' and common[i - 1] == '--batch-size' else a) for i, a in enumerate(common)]
    r2 = run('train', 'mlp.json', *half, '--epochs', '2', '--lr-schedule', 'cosine', '--resume', 'cos.ckpt')
    expect(r1.returncode == 0 and r2.returncode == 0 and
           'note: resumed with other settings than the checkpoint\'s: --batch-size 64 -> 32, --epochs 1 -> 2 '
           '(the cosine schedule now spans the new --epochs' in r2.stderr, 'resumed with other settings: a note', r2.stderr)
    r2 = run('train', 'mlp.json', *common, '--epochs', '2', '--resume', 'b.ckpt', '--seed', '5', '--save', 'c.ckpt')
    expect(r2.returncode == 0 and "the checkpoint's: --seed 0 -> 5" in r2.stderr, 'a resume with another --seed: a note',
           r2.stderr)

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

    # The checkpoint records the run and how its inputs were prepared.
    with open('a.ckpt', 'rb') as f:
        meta = json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))['__metadata__']
    inputs, training = json.loads(meta.get('inputs', '{}')), json.loads(meta.get('training', '{}'))
    expect(inputs.get('dataset') == 'synthetic' and 'pixels' in inputs and inputs.get('test_transform') == {},
           'the checkpoint records the inputs', str(meta))
    expect(training.get('batch_size') == 64 and training.get('optimizer', {}).get('type') == 'adam',
           'the checkpoint records the training settings', str(meta))

    # --accumulate K: batches of 16, 4 per step, train as batches of 64 (500
    # rows: the epoch's last step is 16 + 16 + 16 + 4 rows, as its last batch
    # of 64 is 52). A model without dropout or batch norm, whose batches are
    # not per-batch random or per-batch statistics.
    with open('plain.json', 'w') as f:
        json.dump({"seed": 3, "input": {"shape": [8]}, "layers": [{"type": "linear", "out_features": 16}, {"type": "tanh"},
                   {"type": "linear", "out_features": 4}], "loss": {"type": "cross_entropy"}}, f)
    plain = ['--data', 'synthetic:500', '--devices', 'cpu:0,cpu:1', '--workers', '0', '--epochs', '2',
             '--optimizer', '{"type": "sgd", "lr": 0.2, "momentum": 0.9}']
    r1 = run('train', 'plain.json', *plain, '--batch-size', '64', '--save', 'big.ckpt')
    r2 = run('train', 'plain.json', *plain, '--batch-size', '16', '--accumulate', '4', '--save', 'acc.ckpt')
    expect(r1.returncode == 0 and r2.returncode == 0, '--accumulate trains', r1.stderr + r2.stderr)
    expect(last_json(r2.stdout)['steps'] == last_json(r1.stdout)['steps'] == 16, 'steps counted per optimizer step',
           r1.stdout + r2.stdout)
    big, acc = safetensors_tensors('big.ckpt'), safetensors_tensors('acc.ckpt')
    worst = max(max(abs(a - b) / max(1e-2, abs(a), abs(b)) for a, b in
                    zip(struct.unpack(f'<{len(big[k]) // 4}f', big[k]), struct.unpack(f'<{len(acc[k]) // 4}f', acc[k])))
                for k in big if not k.startswith('optimizer.'))
    expect(worst < 1e-4, f'--accumulate 4 x 16 rows = batches of 64 (worst relative difference {worst:.2e})')
    # With reduction "sum" the batches' sums add up unscaled (lr smaller: gradients 64 times a mean's).
    with open('plain_sum.json', 'w') as f:
        json.dump({"seed": 3, "input": {"shape": [8]}, "layers": [{"type": "linear", "out_features": 16}, {"type": "tanh"},
                   {"type": "linear", "out_features": 4}], "loss": {"type": "cross_entropy", "reduction": "sum"}}, f)
    plain_sum = [a if a != '{"type": "sgd", "lr": 0.2, "momentum": 0.9}' else '{"type": "sgd", "lr": 0.003, "momentum": 0.9}'
                 for a in plain]
    r1 = run('train', 'plain_sum.json', *plain_sum, '--batch-size', '64', '--save', 'big_sum.ckpt')
    r2 = run('train', 'plain_sum.json', *plain_sum, '--batch-size', '16', '--accumulate', '4', '--save', 'acc_sum.ckpt')
    expect(r1.returncode == 0 and r2.returncode == 0, '--accumulate trains a summed loss', r1.stderr + r2.stderr)
    big_s, acc_s = safetensors_tensors('big_sum.ckpt'), safetensors_tensors('acc_sum.ckpt')
    worst = max(max(abs(a - b) / max(1e-2, abs(a), abs(b)) for a, b in
                    zip(struct.unpack(f'<{len(big_s[k]) // 4}f', big_s[k]), struct.unpack(f'<{len(acc_s[k]) // 4}f', acc_s[k])))
                for k in big_s if not k.startswith('optimizer.'))
    moved = max(max(abs(a - b) for a, b in zip(struct.unpack(f'<{len(big_s[k]) // 4}f', big_s[k]),
                                               struct.unpack(f'<{len(big[k]) // 4}f', big[k])))
                for k in big_s if not k.startswith('optimizer.'))
    expect(worst < 1e-4 and moved > 1e-3,
           f'--accumulate 4 x 16 rows of a summed loss = batches of 64 (worst relative difference {worst:.2e}; '
           f'{moved:.2e} from the mean\'s run)')

    # --clip-grad-norm changes the run; --eval-every with --save-best keeps the best evaluation.
    r3 = run('train', 'plain.json', *plain, '--batch-size', '64', '--clip-grad-norm', '0.05', '--save', 'clip.ckpt',
             '--eval-every', '5', '--save-best', 'best.ckpt', '--best-metric', 'test_loss', '--log', 'e.jsonl')
    expect(r3.returncode == 0, '--clip-grad-norm, --eval-every, --save-best train', r3.stderr)
    clip = safetensors_tensors('clip.ckpt')
    expect(any(clip[k] != big[k] for k in big if not k.startswith('optimizer.')), '--clip-grad-norm 0.05 clips')
    logged = [json.loads(line) for line in open('e.jsonl')]
    expect([e['step'] for e in logged] == [5, 8, 10, 15, 16], 'evaluations every 5 steps and at each epoch end',
           str(logged))
    best = min(logged, key=lambda e: e['test_loss'])
    out3 = last_json(r3.stdout)
    expect(out3.get('best', {}).get('step') == best['step'], 'the best evaluation is reported', r3.stdout)
    r = run('eval', 'plain.json', 'best.ckpt', '--data', 'synthetic:500', '--devices', 'cpu:0')
    expect(r.returncode == 0 and abs(last_json(r.stdout)['test_loss'] - best['test_loss']) < 1e-5,
           '--save-best keeps the best evaluation\'s model', r.stdout + r.stderr + str(best))
    r = run('train', 'plain.json', *plain, '--accumulate', '0')
    expect(r.returncode == 2, '--accumulate 0 exits 2', r.stderr)

    # --grad-scaler: the scale is a power of two and nothing overflows here,
    # so the run is bitwise the run without it (alone: PyTorch's defaults; with
    # --accumulate, whose losses dp train scales itself); the final JSON and
    # the checkpoint's record carry it; --resume restores its state (the scale
    # grows every 3 steps: one started afresh would end lower); a bad one
    # exits 2 naming the key.
    r = run('train', 'plain.json', *plain, '--batch-size', '64', '--save', 'gs.ckpt', '--grad-scaler')
    expect(r.returncode == 0 and safetensors_tensors('gs.ckpt') == big, '--grad-scaler trains bitwise as without it',
           r.stderr)
    out = last_json(r.stdout) if r.returncode == 0 else {}
    expect(out.get('grad_scale') == 65536.0 and out.get('skipped_steps') == 0, '--grad-scaler in the final JSON', r.stdout)
    r = run('train', 'plain.json', *plain, '--batch-size', '16', '--accumulate', '4', '--save', 'gsacc.ckpt',
            '--grad-scaler', '{"growth_interval": 3}')
    expect(r.returncode == 0 and safetensors_tensors('gsacc.ckpt') == acc,
           '--grad-scaler with --accumulate trains bitwise as without it', r.stderr)
    with open('gsacc.ckpt', 'rb') as f:
        meta = json.loads(f.read(struct.unpack('<Q', f.read(8))[0]))['__metadata__']
    expect(json.loads(meta.get('training', '{}')).get('grad_scaler') == {'growth_interval': 3} and
           json.loads(meta.get('grad_scaler', '{}')).get('scale') == 65536.0 * 32,
           'the checkpoint records --grad-scaler and its state (16 steps, growing every 3)', str(meta))
    gs = ['--batch-size', '64', '--grad-scaler', '{"growth_interval": 3}']
    r1 = run('train', 'plain.json', *plain, *gs)
    one_epoch = ['1' if i and plain[i - 1] == '--epochs' else a for i, a in enumerate(plain)]
    r2 = run('train', 'plain.json', *one_epoch, *gs, '--save', 'gs1.ckpt')
    r3 = run('train', 'plain.json', *plain, *gs, '--resume', 'gs1.ckpt', '--save', 'gs2.ckpt')
    expect(r1.returncode == r2.returncode == r3.returncode == 0 and
           last_json(r3.stdout)['grad_scale'] == last_json(r1.stdout)['grad_scale'] == 65536.0 * 32 and
           safetensors_tensors('gs2.ckpt') == big, '--resume continues the grad scaler exactly',
           r1.stdout + r2.stderr + r3.stdout + r3.stderr)
    r = run('train', 'plain.json', *plain, '--grad-scaler', '{"backoff_factor": 2}')
    expect(r.returncode == 2 and '/backoff_factor' in r.stderr, 'a bad --grad-scaler exits 2 naming the key', r.stderr)

    # dp eval prepares the test set as the checkpoint records: MNIST-style IDX
    # files (normalised with MNIST's mean and std by dp train).
    os.mkdir('mn')
    for prefix, n in [('train', 256), ('t10k', 64)]:
        images = bytes((i * 37 + j) % 256 for i in range(n) for j in range(28 * 28))
        with gzip.open(f'mn/{prefix}-images-idx3-ubyte.gz', 'wb') as f:
            f.write(struct.pack('>iiii', 2051, n, 28, 28) + images)
        with gzip.open(f'mn/{prefix}-labels-idx1-ubyte.gz', 'wb') as f:
            f.write(struct.pack('>ii', 2049, n) + bytes(i % 10 for i in range(n)))
    with open('mn.json', 'w') as f:
        json.dump({"seed": 1, "input": {"shape": [1, 28, 28]}, "layers": [{"type": "flatten"},
                   {"type": "linear", "out_features": 10}], "loss": {"type": "cross_entropy"}}, f)
    r = run('train', 'mn.json', '--data', 'mnist:mn', '--devices', 'cpu:0', '--workers', '0', '--batch-size', '64',
            '--save', 'mn.ckpt')
    expect(r.returncode == 0, 'trains on IDX files', r.stderr)
    r = run('eval', 'mn.json', 'mn.ckpt', '--data', 'mnist:mn', '--devices', 'cpu:0')
    recorded = last_json(r.stdout)
    expect(r.returncode == 0 and 'as the checkpoint records' in r.stderr and '0.1307' in r.stderr,
           'dp eval uses the recorded normalisation', r.stderr)
    r = run('eval', 'mn.json', 'mn.ckpt', '--data', 'mnist:mn', '--devices', 'cpu:0', '--transform', '{}')
    expect(r.returncode == 0 and abs(last_json(r.stdout)['test_loss'] - recorded['test_loss']) > 1e-3,
           '--transform overrides it (plain [0, 1] pixels give another loss)', r.stdout + str(recorded))
    # The same files uncompressed (as some mirrors ship them): read alike.
    os.mkdir('mn_raw')
    for name in os.listdir('mn'):
        with gzip.open(f'mn/{name}', 'rb') as f, open(f'mn_raw/{name[:-3]}', 'wb') as g:
            g.write(f.read())
    r = run('eval', 'mn.json', 'mn.ckpt', '--data', 'mnist:mn_raw', '--devices', 'cpu:0')
    expect(r.returncode == 0 and last_json(r.stdout)['test_loss'] == recorded['test_loss'],
           'uncompressed IDX files evaluate as the compressed ones', r.stdout + r.stderr)

    # --max-steps stops early (benchmarks), exit 0, no epoch completed: no figures of one (null, not 0).
    r = run('train', 'mlp.json', *common, '--epochs', '3', '--max-steps', '5')
    out = last_json(r.stdout)
    expect(r.returncode == 0 and out['epochs'] == 0 and 'max-steps' in r.stderr, '--max-steps', r.stdout + r.stderr)
    expect(out['test_accuracy'] is None and out['test_loss'] is None and out['train_loss'] is None and out['steps'] == 5,
           '--max-steps reports no epoch figures', r.stdout)

    # Benchmark.
    # bench makes one batch of synthetic samples: --batch-size 1 ran into synthetic:N's
    # minimum (naming an option bench does not have), a huge one into bad_alloc.
    r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--batch-size', '1', '--steps', '1')
    expect(r.returncode == 0 and last_json(r.stdout)['batch_size'] == 1, 'bench --batch-size 1', r.stdout + r.stderr)
    r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--batch-size', '100000000000000', '--steps', '1')
    expect(r.returncode == 1 and '--batch-size 100000000000000: 100000000000000 synthetic samples' in r.stderr and
           "more than this machine's memory" in r.stderr and '--data' not in r.stderr,
           'bench with a batch larger than the machine exits 1 naming --batch-size', r.stderr)
    r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--batch-size', '32', '--steps', '5')
    expect(r.returncode == 0 and last_json(r.stdout)['samples_per_second'] > 0, 'bench prints samples/s', r.stdout + r.stderr)
    # GPU knobs on CPU devices: the speed preset and fp32 are accepted (and
    # reported); bf16/fp16 are refused naming why; an unknown precision is usage.
    r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--batch-size', '32', '--steps', '2', '--fast', '--precision', 'fp32')
    j = last_json(r.stdout) if r.returncode == 0 else {}
    expect(j.get('allow_tf32') is True and j.get('cudnn_benchmark') is True and j.get('precision') == 'fp32',
           '--fast sets TF32 and cudnn.benchmark; fp32 on CPUs', r.stdout + r.stderr)
    for p in ('bf16', 'fp16'):
        r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--steps', '2', '--precision', p)
        expect(r.returncode == 2 and '--precision ' + p in r.stderr and 'CUDA devices' in r.stderr,
               f'--precision {p} on CPUs: refused, naming why', r.stdout + r.stderr)
    r = run('bench', 'mlp.json', '--devices', 'cpu:0', '--steps', '2', '--precision', 'int8')
    expect(r.returncode == 2 and 'int8' in r.stderr, '--precision int8: usage', r.stderr)

    # Ctrl-C: stops after the current step, writes the checkpoint, exits 130.
    p = subprocess.Popen([DP, 'train', 'mlp.json', *common, '--epochs', '1000', '--save', 'c.ckpt'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    p.send_signal(signal.SIGINT)
    so, se = p.communicate(timeout=60)
    expect(p.returncode == 130, 'Ctrl-C exits 130', se)
    expect(os.path.exists('c.ckpt') and last_json(so)['interrupted'] is True, 'Ctrl-C writes the checkpoint', so + se)
    expect(not [f for f in os.listdir('.') if '.tmp' in f], 'no temporary files left', str(os.listdir('.')))
    # SIGTERM (a batch system's preemption) stops the same way, exit 143; a Ctrl-C after it is the
    # same stop, not a second one (launchers pass a terminal's Ctrl-C on and send SIGTERM too).
    p = subprocess.Popen([DP, 'train', 'mlp.json', *common, '--epochs', '1000', '--save', 't.ckpt'],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.0)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # (sent together, the kernel hands over SIGINT first: the lower number)
    p.send_signal(signal.SIGINT)
    so, se = p.communicate(timeout=60)
    expect(p.returncode == 143 and 'stopped by SIGTERM' in se, 'SIGTERM exits 143 after the step', se)
    expect(os.path.exists('t.ckpt') and last_json(so)['interrupted'] is True, 'SIGTERM writes the checkpoint', so + se)

    # Help that cannot be written (a full disk) is a failure, not exit 0.
    if os.path.exists('/dev/full'):
        with open('/dev/full', 'w') as full:
            r = subprocess.run([DP, '--help'], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
        expect(r.returncode == 1 and 'cannot write the help' in r.stderr, 'dp --help > /dev/full exits 1', r.stderr)

    # Mistakes a shell user makes, said plainly and before any training.
    r = run('trian', 'mlp.json')
    expect(r.returncode == 2 and "unknown command 'trian' (did you mean 'train'?)" in r.stderr, 'a misspelt command',
           r.stderr)
    r = run('train', 'mlp.json', '--batch_size', '3')
    expect(r.returncode == 2 and "unknown option '--batch_size' (did you mean '--batch-size'?)" in r.stderr,
           'an option spelt with underscores', r.stderr)
    r = run('train', 'mlp.json', '--lr', '0.1')
    expect(r.returncode == 2 and "the optimizer's settings go in --optimizer's JSON" in r.stderr, '--lr: where it goes',
           r.stderr)
    r = run('train', 'mlp.json', '--data', 'synthetic:64', '--max-steps', '1', '--workers', '0', '--devices', 'cpu:0',
            '--devices', 'cpu:0,cpu:1')
    expect(r.returncode == 0 and last_json(r.stdout)['devices'] == 2, 'an option given twice: the last one', r.stderr)
    r = run('train', 'mlp.json', '--batch-size', '0')
    expect(r.returncode == 2 and "--batch-size: expected an integer >= 1, got '0'" in r.stderr, 'a range, in words',
           r.stderr)
    r = run('train', 'mlp.json', '--data', 'synthetic:64', '--clip-grad-norm', '-1')
    expect(r.returncode == 2 and 'expected a finite number >= 0' in r.stderr, 'a negative clip norm', r.stderr)
    for opt in ('--save', '--save-best', '--plot'):
        r = run('train', 'mlp.json', *common, opt, '/nonexistent-dir/x')
        expect(r.returncode == 2 and f'{opt}: cannot write /nonexistent-dir/x: the directory /nonexistent-dir does not '
               'exist' in r.stderr and 'epoch 1' not in r.stderr and not r.stderr.startswith('\n'),
               f'{opt} in a missing folder: refused before training', r.stderr)
    r = run('train', 'mlp.json', *common, '--lr-schedule', '{"type": "cosine"')
    expect(r.returncode == 2 and "--lr-schedule: expected constant, cosine, a schedule's type" in r.stderr,
           'a broken schedule JSON: said before the data loads', r.stderr)
    # A type alone takes its defaults; a cosine's T_max left out is the run's steps, as "cosine".
    r = run('train', 'mlp.json', *common, '--lr-schedule', 'linear', '--max-steps', '3')
    expect(r.returncode == 0, '--lr-schedule linear: its defaults', r.stderr)
    r1 = run('train', 'mlp.json', *common, '--lr-schedule', 'cosine', '--save', 'cos1.ckpt')
    r2 = run('train', 'mlp.json', *common, '--lr-schedule', '{"type": "cosine"}', '--save', 'cos2.ckpt')
    a, b = safetensors_tensors('cos1.ckpt'), safetensors_tensors('cos2.ckpt')
    expect(r1.returncode == 0 and r2.returncode == 0 and a == b, '{"type": "cosine"} trains as cosine',
           r1.stderr + r2.stderr)
    # Weights for PyTorch from a checkpoint: PyTorch's state_dict keys (num_batches_tracked an int64 0), no optimizer.
    r = run('export', 'mlp.json', 'cos1.ckpt', '--safetensors', 'w.safetensors')
    w, c = safetensors_tensors('w.safetensors'), safetensors_tensors('cos1.ckpt')
    model_keys = {'0.weight', '0.bias', '3.weight', '3.bias', '3.running_mean', '3.running_var', '4.weight', '4.bias'}
    expect(r.returncode == 0 and last_json(r.stdout)['safetensors'] == 'w.safetensors' and
           set(w) == model_keys | {'3.num_batches_tracked'} and w['3.num_batches_tracked'] == bytes(8) and
           all(w[k] == c[k] for k in model_keys) and any(k.startswith('optimizer.') for k in c),
           'export --safetensors: the model\'s tensors and num_batches_tracked, without the optimizer\'s',
           r.stderr + str(sorted(w)))
    # Under a launcher, eval and export run on rank 0 alone (not once a rank, printing or writing the same).
    r = run('eval', 'mlp.json', 'cos1.ckpt', '--data', 'synthetic:2048', env=dict(os.environ, RANK='1', WORLD_SIZE='2'))
    r0 = run('eval', 'mlp.json', 'cos1.ckpt', '--data', 'synthetic:2048', env=dict(os.environ, RANK='0', WORLD_SIZE='2'))
    expect(r.returncode == 0 and r.stdout == '' and r0.returncode == 0 and 'test_accuracy' in last_json(r0.stdout),
           'dp eval under a launcher: rank 0 prints, rank 1 nothing', r.stdout + r.stderr + r0.stderr)
    r = run('export', 'mlp.json', 'cos1.ckpt')
    expect(r.returncode == 2 and '--onnx FILE, --safetensors FILE, or both' in r.stderr, 'export needs an output',
           r.stderr)
    # --save-best across a resume: the best so far travels in the checkpoint (accuracy peaks at epoch 4 here, 0.9511,
    # and epoch 5 is worse: the resumed run must not replace the best checkpoint with epoch 5's).
    r1 = run('train', 'mlp.json', *common, '--epochs', '4', '--save', 'sb.ckpt', '--save-best', 'best.ckpt')
    r2 = run('train', 'mlp.json', *common, '--epochs', '5', '--resume', 'sb.ckpt', '--save-best', 'best.ckpt')
    best = json.loads(open_header('best.ckpt')['__metadata__']['best'])
    expect(r1.returncode == 0 and r2.returncode == 0 and last_json(r2.stdout)['best'] == last_json(r1.stdout)['best']
           and best['step'] == 128, 'a resumed run keeps the best so far', r1.stdout + r2.stdout + str(best))
    # A finished run resumed with the same --epochs: nothing to train, and it says so.
    r = run('train', 'mlp.json', *common, '--resume', 'cos1.ckpt')
    expect(r.returncode == 0 and 'has trained 1 epoch(s) and --epochs (the run\'s total) is 1' in r.stderr,
           'resuming a finished run: a note', r.stderr)
    # Inside an epoch the position counts batches of the checkpoint's batch size: another is refused.
    r = run('train', 'mlp.json', *common, '--max-steps', '5', '--save', 'b5.ckpt')
    half = [('32' if a == '64' and common[i - 1] == '--batch-size' else a) for i, a in enumerate(common)]
    r = run('train', 'mlp.json', *half, '--resume', 'b5.ckpt')
    expect(r.returncode == 2 and 'was saved before its epoch ended (step 5) with --batch-size 64; resume it with '
           '--batch-size 64' in r.stderr, 'another batch size inside an epoch: refused', r.stderr)
    # After an epoch's end another batch size may go on: the steps (and a cosine's T_max) count the epochs as they
    # ran (32 steps of 64, then 64 of 32), not epochs x the new steps per epoch (was: steps 64, lr half the base).
    r1 = run('train', 'mlp.json', *common, '--lr-schedule', 'cosine', '--save', 'bs.ckpt')
    r2 = run('train', 'mlp.json', *half, '--epochs', '2', '--lr-schedule', 'cosine', '--resume', 'bs.ckpt',
             '--log', 'bs.jsonl')
    logged = [json.loads(line) for line in open('bs.jsonl')] if os.path.exists('bs.jsonl') else [{}]
    expect(r1.returncode == 0 and r2.returncode == 0 and last_json(r2.stdout)['steps'] == 96 and
           logged[-1].get('step') == 96 and
           math.isclose(logged[-1].get('lr', 1), 0.01 * (1 + math.cos(math.pi * 95 / 96)) / 2, rel_tol=1e-6),
           'resumed after an epoch with another batch size: its steps; cosine over them (the last step\'s lr)',
           r2.stdout + r2.stderr + str(logged[-1]))
    # Before training, not an epoch later (or never): an empty set, a test set the model cannot take.
    for name, sizes, said in [('mn0', [('train', 0, 28), ('t10k', 8, 28)], 'the training set is empty'),
                              ('mn8', [('train', 64, 28), ('t10k', 8, 8)],
                               "the test set's samples are [1, 8, 8] (after its transform); the model's input is [1, 28, 28]")]:
        os.mkdir(name)
        for prefix, n, side in sizes:
            with gzip.open(f'{name}/{prefix}-images-idx3-ubyte.gz', 'wb') as f:
                f.write(struct.pack('>iiii', 2051, n, side, side) + bytes(n * side * side))
            with gzip.open(f'{name}/{prefix}-labels-idx1-ubyte.gz', 'wb') as f:
                f.write(struct.pack('>ii', 2049, n) + bytes(n))
        r = run('train', 'mn.json', '--data', f'mnist:{name}', '--devices', 'cpu:0', '--workers', '0')
        expect(r.returncode == 2 and said in r.stderr and 'epoch 1' not in r.stderr, f'refused before training: {said}',
               r.stdout + r.stderr)
    # A write that fails once training runs: the run ends (result printed), then exits 1 saying what was lost.
    if os.path.exists('/dev/full'):
        r = run('train', 'mlp.json', *common, '--log', '/dev/full')
        expect(r.returncode == 1 and last_json(r.stdout)['steps'] == 32 and
               '--log: cannot write /dev/full (No space left on device)' in r.stderr, '--log on a full disk: exit 1',
               r.stdout + r.stderr)
        with open('/dev/full', 'w') as full:
            p = subprocess.run([DP, 'train', 'mlp.json', *common, '--max-steps', '3'], stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=300)
        expect(p.returncode == 1 and 'cannot write the result to stdout' in p.stderr, 'stdout on a full disk: exit 1',
               p.stderr)
    # Typos and PyTorch's names: the option meant (was CLI11's "The following arguments were not expected: 1 --epoch").
    for given, said in [('--epoch', "unknown option '--epoch' (did you mean '--epochs'?)"),
                        ('--num-workers', "unknown option '--num-workers' (did you mean '--workers'?)"),
                        ('--weight-decay', "the optimizer's settings go in --optimizer's JSON"),
                        ('--frobnicate', "unknown option '--frobnicate' (dp train --help lists them)")]:
        r = run('train', 'mlp.json', given, '1')
        expect(r.returncode == 2 and said in r.stderr and 'not expected' not in r.stderr, f'{given}: {said}', r.stderr)
    # Options before the model: --plugin takes one value (its list took the model: "model is required"), and
    # --grad-scaler's optional JSON cannot be told from a model: said so.
    r = run('train', '--plugin', SWISH, 'mlp.json', *common, '--max-steps', '1')
    expect(r.returncode == 0, '--plugin before the model', r.stderr)
    r = run('train', '--grad-scaler', 'mlp.json', *common, '--max-steps', '1')
    expect(r.returncode == 2 and "--grad-scaler took 'mlp.json' as its value" in r.stderr,
           '--grad-scaler before the model: what happened', r.stderr)
    r = run('train', 'mlp.json', *common, '--max-steps', '1', '--save', '--odd.ckpt')  # a value that begins with --
    expect(r.returncode == 0 and os.path.exists('--odd.ckpt'), 'an option value beginning with --', r.stderr)
    # Outputs through a symbolic link, to a FIFO, to a device: written through / in place (renamed over,
    # the link became a file, the FIFO a file and, as root, /dev/full a 2 MB file).
    os.makedirs('real', exist_ok=True)
    open('real/target.ckpt', 'w').close()
    os.symlink('real/target.ckpt', 'link.ckpt')
    r = run('train', 'mlp.json', *common, '--max-steps', '1', '--save', 'link.ckpt')
    expect(r.returncode == 0 and os.path.islink('link.ckpt') and os.path.isfile('real/target.ckpt') and
           open_header('real/target.ckpt')['__metadata__'].get('step') == '1', '--save through a symbolic link',
           r.stderr)
    import stat as _stat
    os.mkfifo('fifo.ckpt')
    r = run('train', 'mlp.json', *common, '--max-steps', '1', '--save', 'fifo.ckpt')  # no reader: an error, no wait
    expect(r.returncode == 1 and 'a FIFO with no reader' in r.stderr, '--save into a FIFO without a reader', r.stderr)
    got = []
    reader = __import__('threading').Thread(target=lambda: got.append(open('fifo.ckpt', 'rb').read()), daemon=True)
    reader.start()
    time.sleep(0.2)  # (its open waits for the writer: it is the reader dp's open finds)
    r = run('train', 'mlp.json', *common, '--max-steps', '1', '--save', 'fifo.ckpt')
    reader.join(60)
    if reader.is_alive():  # dp never opened it: let the reader's open return
        os.close(os.open('fifo.ckpt', os.O_WRONLY | os.O_NONBLOCK))
    expect(r.returncode == 0 and _stat.S_ISFIFO(os.lstat('fifo.ckpt').st_mode) and got and len(got[0]) > 1000,
           '--save into a FIFO: written in place, the FIFO stays', r.stderr)
    os.symlink('real/nothing.ckpt', 'dangling.ckpt')
    r = run('train', 'mlp.json', *common, '--max-steps', '1', '--save', 'dangling.ckpt')
    expect(r.returncode == 2 and 'a symbolic link to a file that does not exist' in r.stderr and
           'epoch 1' not in r.stderr, '--save through a link to nothing: refused before training', r.stderr)
    if os.path.exists('/dev/full'):
        r = run('train', 'mlp.json', *common, '--max-steps', '1', '--save', '/dev/full')
        expect(r.returncode == 1 and 'No space left on device' in r.stderr and
               _stat.S_ISCHR(os.stat('/dev/full').st_mode), '--save /dev/full: exit 1, the device stays', r.stderr)
    # --accumulate: the progress line names batches and optimizer steps (its "step 40/40" counted batches).
    r = run('train', 'mlp.json', '--data', 'synthetic:640', '--batch-size', '16', '--devices', 'cpu:0', '--workers', '0',
            '--accumulate', '4')
    expect(r.returncode == 0 and 'batch 40/40 (step 10)' in r.stderr and last_json(r.stdout)['steps'] == 10,
           '--accumulate: batch and step in the progress line', r.stderr)
    # Resumed on another number of devices, a model with batch norm (mlp.json) trains otherwise: said.
    r = run('train', 'mlp.json', '--data', 'synthetic:640', '--batch-size', '64', '--devices', 'cpu:0,cpu:1',
            '--workers', '0', '--max-steps', '2', '--save', 'bn.ckpt')
    r = run('train', 'mlp.json', '--data', 'synthetic:640', '--batch-size', '64', '--devices', 'cpu:0',
            '--workers', '0', '--max-steps', '3', '--resume', 'bn.ckpt')
    expect(r.returncode == 0 and "batch norm's statistics are each device's" in r.stderr,
           'resumed on other devices with batch norm: a note', r.stderr)
    # A diverged model's NaN test loss: the result and --log stay JSON (null), not printf's "-nan".
    r = run('train', 'mlp.json', '--data', 'synthetic:64', '--devices', 'cpu:0', '--workers', '0', '--epochs', '1',
            '--optimizer', '{"type": "sgd", "lr": 1e30}', '--log', 'nan.jsonl', '--save-best', 'nanbest.ckpt',
            '--best-metric', 'test_loss')
    try:
        result = last_json(r.stdout)
        logged = [json.loads(line) for line in open('nan.jsonl')]
    except (ValueError, IndexError, OSError) as e:
        result, logged = None, str(e)
    r2 = run('train', 'mlp.json', '--data', 'synthetic:640', '--devices', 'cpu:0', '--workers', '0', '--max-steps', '5',
             '--optimizer', '{"type": "sgd", "lr": 1e30}')
    import re as _re
    expect(r2.returncode == 1 and _re.search(r'the loss is \w+ in training batch [2-5] \(counting from 1\)', r2.stderr),
           'a NaN loss names its batch, counting from 1', r2.stderr)
    expect(r.returncode == 0 and result is not None and result['test_loss'] is None and
           logged[-1]['test_loss'] is None and 'is not a number' in r.stderr and not os.path.exists('nanbest.ckpt'),
           'a NaN test loss: null in the JSON, --save-best says why it kept nothing', r.stdout + r.stderr + str(logged))

print(f'{passed} passed, {failed} failed')
sys.exit(1 if failed else 0)
