#!/usr/bin/env python3
"""ONNX export against ONNX Runtime: models exported by dp (through
EXPORT_TOOL, tests/onnx_export_tool.cpp, and dp.Model.export_onnx where the
binding has it) run in onnxruntime on real inputs and must give dp's own
forward (evaluation mode) within 1e-4 (max abs difference):

- the Fashion-MNIST CNN of examples/fashion_mnist_cnn.json, trained briefly
  (so batch norm has real running statistics), on the whole test set
  (random inputs and weights where Debian's dataset-fashion-mnist is absent);
- small models that together use every built-in layer type and the options
  that change the mapping (ceil_mode, count_include_pad, dilation, groups,
  gelu's two forms, batch norm without running statistics or affine, partial
  flatten, linear on rank-3 inputs, ...), with random weights, perturbed
  running statistics and batches of 1, 5 and 16.

Where they exist (after the C ABI's dp_model_export_onnx is wired in), the
same files also come from dp.Model.export_onnx and from `dp export MODEL.json
CHECKPOINT --onnx OUT` (DP_CLI; the CNN from a training checkpoint), byte for
byte; and a plugin's layer (DP_SWISH) is refused with dp.ModelError naming it.

usage: check_onnx.py EXPORT_TOOL   (env: DP_LIBRARY, DP_SOURCE_ROOT; optional: DP_CLI, DP_SWISH)

Needs numpy, onnx and onnxruntime (PyPI; test-only): when this interpreter
lacks them it re-runs itself with DP_ONNX_PYTHON or
/root/.cache/dp-torch/bin/python if that has them, else exits 77 (skipped).
"""
import json
import os
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4
CANDIDATES = [os.environ.get('DP_ONNX_PYTHON'), '/root/.cache/dp-torch/bin/python']


def has_modules():
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        return True
    except ImportError:
        return False


def ensure_modules():
    if has_modules():
        return
    if os.environ.get('DP_CHECK_ONNX_REEXEC') != '1':
        for py in CANDIDATES:
            if py and os.path.exists(py):
                probe = subprocess.run([py, '-c', 'import numpy, onnx, onnxruntime'], capture_output=True)
                if probe.returncode == 0:
                    env = dict(os.environ, DP_CHECK_ONNX_REEXEC='1')
                    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)
    print('SKIP: no Python with numpy, onnx and onnxruntime (pip install onnx onnxruntime; '
          'or set DP_ONNX_PYTHON)')
    sys.exit(77)


ensure_modules()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

ROOT = os.environ.get('DP_SOURCE_ROOT') or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'bindings', 'python'))
import dp  # noqa: E402

# The models of tests/test_onnx.cpp (tests/onnx_models.json), but the CNN
# (trained below from examples/): together, every built-in type.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'onnx_models.json')) as f:
    MODELS = {name: case['model'] for name, case in json.load(f).items() if name != 'fashion_mnist_cnn'}


def same_bytes(name, a, b, how):
    with open(a, 'rb') as fa, open(b, 'rb') as fb:
        if fa.read() != fb.read():
            sys.exit(f'FAIL {name}: {how} wrote other bytes than the export tool')


def cli_has_export():
    cli = os.environ.get('DP_CLI')
    return bool(cli) and subprocess.run([cli, 'export', '--help'], capture_output=True).returncode == 0


def export(tool, model, spec, tmp, name, checkpoint=None):
    """The model's ONNX file through the export tool (and, where they exist,
    the binding's export_onnx and `dp export`, which must write the same
    bytes). checkpoint: a training checkpoint of the model for `dp export`."""
    mj = os.path.join(tmp, name + '.json')
    wt = os.path.join(tmp, name + '.safetensors')
    out = os.path.join(tmp, name + '.onnx')
    with open(mj, 'w') as f:
        f.write(spec if isinstance(spec, str) else json.dumps(spec))
    model.save_safetensors(wt)
    r = subprocess.run([tool, mj, wt, out], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f'FAIL {name}: {tool} exited {r.returncode}: {r.stderr.strip()}')
    ways = ['onnx_export_tool']
    if hasattr(model, 'export_onnx'):
        via = os.path.join(tmp, name + '.binding.onnx')
        model.export_onnx(via)
        same_bytes(name, out, via, 'dp.Model.export_onnx')
        ways.append('dp.Model.export_onnx')
    if cli_has_export():
        via = os.path.join(tmp, name + '.cli.onnx')
        r = subprocess.run([os.environ['DP_CLI'], 'export', mj, checkpoint or wt, '--onnx', via],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f'FAIL {name}: dp export exited {r.returncode}: {r.stderr.strip()}')
        if json.loads(r.stdout.strip().splitlines()[-1]) != {'onnx': via, 'bytes': os.path.getsize(via)}:
            sys.exit(f'FAIL {name}: dp export printed {r.stdout!r}')
        same_bytes(name, out, via, 'dp export' + (' (from a checkpoint)' if checkpoint else ''))
        ways.append('dp export' + (' (from a checkpoint)' if checkpoint else ''))
    print(json.dumps({'model': name, 'same_bytes_from': ways}))
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)  # this onnx's checker too (a newer one than libonnx's)
    names = ([i.name for i in proto.graph.input], [o.name for o in proto.graph.output])
    if names != (['input'], ['output']):
        sys.exit(f'FAIL {name}: graph inputs/outputs are {names}')
    if any(n.op_type == 'Dropout' for n in proto.graph.node):
        sys.exit(f'FAIL {name}: a Dropout node is left')
    return ort.InferenceSession(out, providers=['CPUExecutionProvider'])


def dp_forward(group, x):
    return np.array(group(np.ascontiguousarray(x, dtype=np.float32)).numpy(), copy=True)


def compare(name, group, session, batches):
    worst, rows = 0.0, 0
    for x in batches:
        want = dp_forward(group, x)
        got = session.run(['output'], {'input': x})[0]
        if got.shape != want.shape:
            sys.exit(f'FAIL {name}: ONNX Runtime gives shape {got.shape}, dp {want.shape}')
        if not np.all(np.isfinite(got)):
            sys.exit(f'FAIL {name}: ONNX Runtime gives non-finite values')
        worst = max(worst, float(np.max(np.abs(got - want))) if got.size else 0.0)
        rows += x.shape[0]
    ok = worst <= TOLERANCE
    print(json.dumps({'model': name, 'rows': rows, 'max_abs_diff': worst, 'ok': ok}))
    return ok


def perturb_running_stats(model, rng):
    """Running statistics away from 0 and 1, and layer norms' (layers named
    norm_*) weights and biases away from their initial 1 and 0."""
    sd = model.state_dict()
    for k, v in sd.items():
        if k.endswith('running_mean') or (k.startswith('norm_') and k.endswith('.bias')):
            sd[k] = rng.normal(0, 0.5, v.shape).astype(np.float32)
        elif k.endswith('running_var') or (k.startswith('norm_') and k.endswith('.weight')):
            sd[k] = rng.uniform(0.3, 2.0, v.shape).astype(np.float32)
    model.load_state_dict(sd)


def check_cnn(tool, tmp):
    path = os.path.join(ROOT, 'examples', 'fashion_mnist_cnn.json')
    with open(path) as f:
        spec = f.read()
    model = dp.Model(spec)
    group = dp.DataParallel(model, devices='cpu:0,cpu:1')
    have_data = all(os.path.exists(os.path.join(dp.FASHION_MNIST_DIR, f'{p}-images-idx3-ubyte.gz'))
                    for p in ('train', 't10k'))
    if have_data:
        # Briefly trained: real weights and running statistics.
        train = dp.DataLoader(dp.FashionMNIST(train=True), batch_size=64, shuffle=True, seed=0)
        opt = dp.Adam(group, lr=0.001)
        group.train()
        for step, (x, y) in enumerate(train):
            group.train_step(opt, x, y)
            if step + 1 == 60:
                break
        test = dp.DataLoader(dp.FashionMNIST(train=False), batch_size=1000, shuffle=False)
        pairs = [(np.array(x.numpy(), copy=True), np.array(y.numpy(), copy=True)) for x, y in test]
        # Sanitizer builds (meson sets it) compare the first batches only: instrumented, the whole
        # test set takes minutes; the release build compares all of it.
        limit = int(os.environ.get('DP_ONNX_TEST_BATCHES') or 0)
        if limit > 0:
            pairs = pairs[:limit]
        batches = [x for x, _ in pairs]
        labels = np.concatenate([y for _, y in pairs])
        what = f'fashion_mnist_cnn (60 training steps; {len(labels)} images of the test set)'
    else:
        rng = np.random.default_rng(0)
        perturb_running_stats(model, rng)
        batches = [rng.normal(0, 1, (256, 1, 28, 28)).astype(np.float32) for _ in range(4)]
        labels = None
        what = 'fashion_mnist_cnn (initial weights; random inputs: no dataset-fashion-mnist)'
    group.eval()
    ckpt = os.path.join(tmp, 'fashion_mnist_cnn.ckpt')
    dp.save_checkpoint(ckpt, group)
    session = export(tool, model, spec, tmp, 'fashion_mnist_cnn', checkpoint=ckpt)
    ok = compare(what, group, session, batches)
    if labels is not None:
        pred_dp = np.concatenate([dp_forward(group, x).argmax(1) for x in batches])
        pred_ort = np.concatenate([session.run(['output'], {'input': x})[0].argmax(1) for x in batches])
        print(json.dumps({'model': 'fashion_mnist_cnn', 'accuracy_dp': float(np.mean(pred_dp == labels)),
                          'accuracy_onnxruntime': float(np.mean(pred_ort == labels)),
                          'argmax_agreement': float(np.mean(pred_dp == pred_ort))}))
    return ok


def check_small(tool, tmp):
    ok = True
    rng = np.random.default_rng(1)
    for name, spec in MODELS.items():
        model = dp.Model(spec)
        perturb_running_stats(model, rng)
        group = dp.DataParallel(model, devices='cpu:0').eval()
        session = export(tool, model, spec, tmp, name)
        shape = tuple(spec['input']['shape'])
        batches = [rng.normal(0, 1.5, (n,) + shape).astype(np.float32) for n in (1, 5, 16)]
        ok = compare(name, group, session, batches) and ok
        if name == 'norms':  # layer_norm written out, as before opset 17 (the export tool's opset argument)
            out = os.path.join(tmp, name + '.opset13.onnx')
            r = subprocess.run([tool, os.path.join(tmp, name + '.json'), os.path.join(tmp, name + '.safetensors'), out, '13'],
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f'FAIL {name} opset 13: {tool} exited {r.returncode}: {r.stderr.strip()}')
            onnx.checker.check_model(onnx.load(out), full_check=True)
            session = ort.InferenceSession(out, providers=['CPUExecutionProvider'])
            ok = compare(name + ' (opset 13)', group, session, batches) and ok
    return ok


def check_plugin(tmp):
    """A plugin's layer type has no ONNX mapping: refused by name, nothing written."""
    swish = os.environ.get('DP_SWISH')
    if not swish or not hasattr(dp.Model, 'export_onnx'):
        return True
    ctx = dp.Context()
    ctx.load_plugin(swish)
    model = dp.Model({"input": {"shape": [4]}, "layers": [
        {"type": "linear", "out_features": 3}, {"type": "swish", "name": "act"},
        {"type": "linear", "out_features": 2}]}, ctx=ctx)
    out = os.path.join(tmp, 'swish.onnx')
    try:
        model.export_onnx(out)
    except dp.ModelError as e:
        ok = "/layers/1 (swish 'act')" in str(e) and 'no ONNX mapping' in str(e) and not os.path.exists(out)
        print(json.dumps({'model': 'swish plugin', 'refused': str(e), 'ok': ok}))
        return ok
    print('FAIL swish plugin: exported a layer type without an ONNX mapping')
    return False


def skip_without_onnx_support(tool, tmp):
    """A libdp built without libonnx-dev exports nothing: skipped, not failed."""
    mj, wt, out = (os.path.join(tmp, 'probe' + ext) for ext in ('.json', '.safetensors', '.onnx'))
    spec = {"input": {"shape": [2]}, "layers": [{"type": "linear", "out_features": 1}]}
    with open(mj, 'w') as f:
        json.dump(spec, f)
    dp.Model(spec).save_safetensors(wt)
    r = subprocess.run([tool, mj, wt, out], capture_output=True, text=True)
    if 'built without ONNX support' in r.stderr:
        print(f'SKIP: {r.stderr.strip()}')
        sys.exit(77)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tool = os.path.abspath(sys.argv[1])
    print(f'onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}')
    with tempfile.TemporaryDirectory(prefix='dp-check-onnx-') as tmp:
        skip_without_onnx_support(tool, tmp)
        ok = check_small(tool, tmp)
        ok = check_plugin(tmp) and ok
        ok = check_cnn(tool, tmp) and ok
    if not ok:
        sys.exit(f'FAIL: a max abs difference above {TOLERANCE}')
    print('OK')


if __name__ == '__main__':
    main()
