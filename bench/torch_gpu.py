#!/usr/bin/env python3
"""PyTorch eager counterpart of `dp bench` on a GPU, for bench/gpu.sh.

Builds the SAME architecture as a dp model JSON (docs/model-format.md: every
built-in layer type, named layers and "inputs" for branches) as a torch
module, and trains it the way `dp bench` does: one fixed host batch in
pinned memory, copied to the GPU with non_blocking=True every step, zero_grad,
forward, loss, backward, optimizer step and loss.item() every step (dp returns
the loss each step), a few warm-up steps, then timed steps. TF32 is off, as
in dp by default (torch.backends.cuda.matmul.allow_tf32 = False,
torch.backends.cudnn.allow_tf32 = False).

    torch_gpu.py info MODEL.json [--dp-lib BUILD/src/libdp.so]
        parameter count and linear-layer MACs per sample; with --dp-lib, the
        parameter tensors' shapes and order are checked against dp's own
        (ctypes, through the C ABI). Needs torch, not a GPU.
    torch_gpu.py train MODEL.json --batch-size 256 --steps 100 [--warmup 10]
        [--optimizer JSON] [--device cuda] [--cudnn-benchmark]
        one JSON line, as `dp bench` prints: samples_per_second, seconds, ...
    torch_gpu.py mm --m 8192 --k 4096 --n 4096 [--iters 50]
        cuBLAS float32 matrix products timed with CUDA events: torch.mm of
        [m, k] x [k, n] and the three products of a linear layer's training
        step; one JSON line with TFLOP/s.
    torch_gpu.py report RESULTS.jsonl [--json OUT.json]
        bench/gpu.sh's tables from its results file (no torch needed).
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

# ----------------------------------------------------------- model JSON --


def strip_comments(text):
    """dp's model files allow // and /* */ comments outside strings."""
    out, i, n, in_str = [], 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == '\\' and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith('//', i):
            while i < n and text[i] != '\n':
                i += 1
            continue
        elif text.startswith('/*', i):
            end = text.find('*/', i + 2)
            i = n if end < 0 else end + 2
            out.append(' ')
            continue
        else:
            out.append(c)
        i += 1
    return ''.join(out)


def load_model_json(path):
    with open(path) as f:
        spec = json.loads(strip_comments(f.read()))
    if spec.get('plugins'):
        raise SystemExit(f'{path}: plugin layers have no PyTorch counterpart here')
    return spec


def pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) else (v, v)


def build_model(spec):
    """A torch module computing what the dp model computes, with the
    parameters in dp's order (per layer: weight, then bias)."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Add(nn.Module):
        def forward(self, *xs):
            y = xs[0]
            for x in xs[1:]:
                y = y + x
            return y

    class Concat(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dim = dim

        def forward(self, *xs):
            return torch.cat(xs, dim=self.dim)

    class GlobalAvgPool(nn.Module):  # [N, C, H, W] -> [N, C]
        def forward(self, x):
            return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)

    def make(t, a, xs):
        x = xs[0]
        if t == 'linear':
            return nn.Linear(x.shape[-1], a['out_features'], bias=a.get('bias', True))
        if t == 'conv2d':
            return nn.Conv2d(x.shape[1], a['out_channels'], pair(a['kernel_size']), stride=pair(a.get('stride', 1)),
                             padding=pair(a.get('padding', 0)), dilation=pair(a.get('dilation', 1)),
                             groups=a.get('groups', 1), bias=a.get('bias', True))
        if t == 'relu':
            return nn.ReLU()
        if t == 'sigmoid':
            return nn.Sigmoid()
        if t == 'tanh':
            return nn.Tanh()
        if t == 'leaky_relu':
            return nn.LeakyReLU(a.get('negative_slope', 0.01))
        if t == 'gelu':
            return nn.GELU(approximate=a.get('approximate', 'none'))
        if t == 'max_pool2d':
            k = pair(a['kernel_size'])
            return nn.MaxPool2d(k, stride=pair(a['stride']) if 'stride' in a else k, padding=pair(a.get('padding', 0)),
                                dilation=pair(a.get('dilation', 1)), ceil_mode=a.get('ceil_mode', False))
        if t == 'avg_pool2d':
            k = pair(a['kernel_size'])
            return nn.AvgPool2d(k, stride=pair(a['stride']) if 'stride' in a else k, padding=pair(a.get('padding', 0)),
                                ceil_mode=a.get('ceil_mode', False),
                                count_include_pad=a.get('count_include_pad', True))
        if t == 'global_avg_pool':
            return GlobalAvgPool()
        if t == 'flatten':
            return nn.Flatten(a.get('start_dim', 1), a.get('end_dim', -1))
        if t == 'dropout':
            return nn.Dropout(a.get('p', 0.5))
        if t in ('batch_norm', 'batch_norm1d', 'batch_norm2d'):
            kw = dict(eps=a.get('eps', 1e-5), momentum=a.get('momentum', 0.1), affine=a.get('affine', True),
                      track_running_stats=a.get('track_running_stats', True))
            cls = nn.BatchNorm2d if x.dim() == 4 else nn.BatchNorm1d
            return cls(x.shape[1], **kw)
        if t == 'softmax':
            return nn.Softmax(dim=a.get('dim', -1))
        if t == 'add':
            return Add()
        if t == 'concat':
            return Concat(a.get('dim', 1))
        raise SystemExit(f'layer type {t!r} has no PyTorch counterpart in bench/torch_gpu.py')

    class Graph(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList()
            self.inputs = []  # per layer: indices of its inputs, -1 for the model's input
            self.linear_macs = 0  # multiply-adds of the linear layers, per sample
            names = {'input': -1}
            probe = torch.zeros([2] + list(spec['input']['shape']))  # shapes by running a batch of 2
            outs = []
            for i, layer in enumerate(spec['layers']):
                t = layer['type']
                if 'inputs' in layer:
                    ins = [names[n] for n in layer['inputs']]
                else:
                    ins = [i - 1]
                xs = [probe if j < 0 else outs[j] for j in ins]
                m = make(t, layer, xs)
                if t == 'linear':
                    rows = xs[0].numel() // xs[0].shape[0] // xs[0].shape[-1]
                    self.linear_macs += rows * m.in_features * m.out_features
                with torch.no_grad():
                    outs.append(m(*xs))
                self.layers.append(m)
                self.inputs.append(ins)
                names[layer.get('name', str(i))] = i
            self.output_shape = list(outs[-1].shape[1:])
            for mod in self.modules():  # the probe batch moved the running statistics
                if isinstance(mod, nn.modules.batchnorm._BatchNorm) and mod.track_running_stats:
                    mod.reset_running_stats()

        def forward(self, x):
            vals = []
            for m, ins in zip(self.layers, self.inputs):
                vals.append(m(*[x if j < 0 else vals[j] for j in ins]))
            return vals[-1]

    return Graph()


def make_loss(spec):
    import torch.nn.functional as F
    loss = spec.get('loss', {'type': 'cross_entropy'})
    if loss['type'] == 'cross_entropy':
        ls = loss.get('label_smoothing', 0.0)
        return (lambda out, y: F.cross_entropy(out, y, label_smoothing=ls)), True
    if loss['type'] == 'mse':
        return (lambda out, y: F.mse_loss(out, y)), False
    raise SystemExit(f'loss {loss["type"]!r} has no PyTorch counterpart here')


def make_optimizer(params, cfg):
    import torch
    t = cfg.get('type', 'sgd')
    if t == 'sgd':
        return torch.optim.SGD(params, lr=cfg.get('lr', 0.01), momentum=cfg.get('momentum', 0.0),
                               dampening=cfg.get('dampening', 0.0), nesterov=cfg.get('nesterov', False),
                               weight_decay=cfg.get('weight_decay', 0.0))
    if t in ('adam', 'adamw'):
        cls = torch.optim.Adam if t == 'adam' else torch.optim.AdamW
        return cls(params, lr=cfg.get('lr', 0.001), betas=tuple(cfg.get('betas', (0.9, 0.999))),
                   eps=cfg.get('eps', 1e-8), weight_decay=cfg.get('weight_decay', 0.0 if t == 'adam' else 0.01))
    raise SystemExit(f'optimizer {t!r} has no PyTorch counterpart here')


# ------------------------------------------------------------------ dp ABI --


def dp_parameter_shapes(lib_path, model_path):
    """[(name, shape)] of dp's parameter tensors, through libdp's C ABI."""
    lib = ctypes.CDLL(lib_path)
    lib.dp_last_error.restype = ctypes.c_char_p
    vp = ctypes.c_void_p

    def check(status, what):
        if status != 0:
            raise SystemExit(f'{what}: status {status}: {lib.dp_last_error().decode()}')

    ctx, model = vp(), vp()
    check(lib.dp_context_create(ctypes.byref(ctx)), 'dp_context_create')
    lib.dp_model_from_file.argtypes = [vp, ctypes.c_char_p, ctypes.POINTER(vp)]
    check(lib.dp_model_from_file(ctx, model_path.encode(), ctypes.byref(model)), 'dp_model_from_file')
    count = ctypes.c_int()
    lib.dp_model_num_parameter_tensors.argtypes = [vp, ctypes.POINTER(ctypes.c_int)]
    check(lib.dp_model_num_parameter_tensors(model, ctypes.byref(count)), 'dp_model_num_parameter_tensors')
    lib.dp_model_parameter_info.argtypes = [vp, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int64)]
    out = []
    for i in range(count.value):
        name, ndim, shape = ctypes.c_char_p(), ctypes.c_int(), (ctypes.c_int64 * 8)()
        check(lib.dp_model_parameter_info(model, i, ctypes.byref(name), ctypes.byref(ndim), shape),
              'dp_model_parameter_info')
        out.append((name.value.decode(), [shape[d] for d in range(ndim.value)]))
    total = ctypes.c_int64()
    lib.dp_model_num_parameters.argtypes = [vp, ctypes.POINTER(ctypes.c_int64)]
    check(lib.dp_model_num_parameters(model, ctypes.byref(total)), 'dp_model_num_parameters')
    lib.dp_model_destroy.argtypes = [vp]
    lib.dp_context_destroy.argtypes = [vp]
    lib.dp_model_destroy(model)
    lib.dp_context_destroy(ctx)
    return out, total.value


# ---------------------------------------------------------------- commands --


def cmd_info(args):
    spec = load_model_json(args.model)
    model = build_model(spec)
    shapes = [list(p.shape) for p in model.parameters()]
    params = sum(p.numel() for p in model.parameters())
    info = {'model': os.path.basename(args.model), 'params': params, 'parameter_tensors': len(shapes),
            'linear_macs_per_sample': model.linear_macs, 'output_shape': model.output_shape}
    ok = True
    if args.dp_lib:
        dp_shapes, dp_total = dp_parameter_shapes(args.dp_lib, args.model)
        info['dp_params'] = dp_total
        same = [s for _, s in dp_shapes] == shapes and dp_total == params
        info['matches_dp'] = same
        if not same:
            ok = False
            for i in range(max(len(dp_shapes), len(shapes))):
                d = dp_shapes[i] if i < len(dp_shapes) else ('(none)', None)
                t = shapes[i] if i < len(shapes) else None
                if d[1] != t:
                    print(f'parameter tensor {i}: dp {d[0]} {d[1]}, torch {t}', file=sys.stderr)
                    break
    print(json.dumps(info))
    return 0 if ok else 1


def setup_cuda(args):
    import torch
    if not torch.cuda.is_available():
        raise SystemExit(f'torch {torch.__version__} sees no CUDA device (torch.version.cuda = {torch.version.cuda})')
    tf32 = bool(getattr(args, 'tf32', False))
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = bool(getattr(args, 'cudnn_benchmark', False))
    return torch.device(args.device)


def cmd_train(args):
    import torch
    spec = load_model_json(args.model)
    dev = setup_cuda(args) if args.device.startswith('cuda') else torch.device(args.device)
    torch.manual_seed(0)
    model = build_model(spec).to(dev)
    model.train()
    # The variants a PyTorch user reaches for: channels_last activations and
    # weights, autocast to bf16/fp16 (fp16 with a GradScaler), torch.compile.
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    amp = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(args.amp)
    scaler = torch.amp.GradScaler('cuda') if args.amp == 'fp16' else None
    fwd = torch.compile(model) if args.compile else model
    loss_fn, classes = make_loss(spec)
    opt = make_optimizer(model.parameters(), json.loads(args.optimizer))
    b = args.batch_size
    pin = dev.type == 'cuda'
    x_host = (torch.rand([b] + list(spec['input']['shape'])) * 2 - 1)
    if classes:
        y_host = torch.randint(0, model.output_shape[0], (b,))
    else:
        y_host = torch.rand([b] + model.output_shape)
    if pin:
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()

    def step():
        x = x_host.to(dev, non_blocking=True)
        y = y_host.to(dev, non_blocking=True)
        if x.dim() == 4:
            x = x.contiguous(memory_format=fmt)
        opt.zero_grad(set_to_none=True)
        with torch.autocast('cuda', dtype=amp, enabled=amp is not None):
            loss = loss_fn(fwd(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    if pin:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    if pin:
        torch.cuda.synchronize()
    sec = time.perf_counter() - t0
    print(json.dumps({'samples_per_second': round(b * args.steps / sec, 2), 'seconds': round(sec, 4),
                      'steps': args.steps, 'batch_size': b, 'loss': loss,
                      'params': sum(p.numel() for p in model.parameters()),
                      'linear_macs_per_sample': model.linear_macs, 'torch': torch.__version__,
                      'cudnn_benchmark': torch.backends.cudnn.benchmark, 'device': str(dev), 'amp': args.amp,
                      'channels_last': args.channels_last, 'compile': args.compile,
                      'allow_tf32': torch.backends.cuda.matmul.allow_tf32}))
    return 0


def cmd_mm(args):
    import torch
    dev = setup_cuda(args)
    m, k, n = args.m, args.k, args.n
    g = torch.Generator(device=dev).manual_seed(0)
    dt = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}[args.dtype]
    a = torch.randn(m, k, device=dev, generator=g).to(dt)      # activations [B, in]
    w = torch.randn(n, k, device=dev, generator=g).to(dt)      # weight [out, in]
    b = torch.randn(k, n, device=dev, generator=g).to(dt)
    go = torch.randn(m, n, device=dev, generator=g).to(dt)     # output gradient [B, out]

    def timed(fn, flops):
        for _ in range(5):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / args.iters
        return {'ms': round(ms, 4), 'tflops': round(flops / (ms * 1e-3) / 1e12, 3)}

    flops = 2.0 * m * n * k
    res = {'m': m, 'k': k, 'n': n, 'iters': args.iters, 'torch': torch.__version__, 'dtype': args.dtype,
           'allow_tf32': torch.backends.cuda.matmul.allow_tf32}
    res['mm'] = timed(lambda: torch.mm(a, b), flops)                 # the reference: [m, k] x [k, n]
    res['forward'] = timed(lambda: torch.mm(a, w.t()), flops)        # y = x W^T
    res['grad_input'] = timed(lambda: torch.mm(go, w), flops)        # dx = dy W
    res['grad_weight'] = timed(lambda: torch.mm(go.t(), a), flops)   # dW = dy^T x
    three = res['forward']['ms'] + res['grad_input']['ms'] + res['grad_weight']['ms']
    res['training_products_tflops'] = round(3 * flops / (three * 1e-3) / 1e12, 3)
    res['device_name'] = torch.cuda.get_device_name(dev)
    print(json.dumps(res))
    return 0


# ------------------------------------------------------------------ report --


def cmd_report(args):
    rows = []
    with open(args.results) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    print(f'report: skipping a bad line: {line[:200]}', file=sys.stderr)
    header = next((r for r in rows if r['kind'] == 'header'), {}).get('result') or {}
    tests = [r for r in rows if r['kind'] == 'test']
    runs = [r for r in rows if r['kind'] == 'bench']
    infos = {r['model']: r.get('result') for r in rows if r['kind'] == 'info'}
    mm = next((r.get('result') for r in rows if r['kind'] == 'mm'), None)

    def rates(model, impl):
        return [r['result']['samples_per_second'] for r in runs if r['model'] == model and r['impl'] == impl
                and r['rc'] == 0 and isinstance(r.get('result'), dict) and 'samples_per_second' in r['result']]

    def median(v):
        return statistics.median(v) if v else None

    def fmt(v, spec='{:,.0f}'):
        return spec.format(v) if v is not None else 'FAILED'

    out = {'header': header, 'tests': {}, 'models': {}, 'large_mlp': None}
    for t in tests:
        out['tests'][t['model']] = t.get('result')
    section = args.section
    if section in ('models', 'all'):
        models = [m for m in dict.fromkeys(r['model'] for r in runs) if m != 'large_mlp']
        print(f'{"model":22} {"params":>9} {"batch":>5} {"dp samples/s":>13} {"torch samples/s":>16} '
              f'{"dp/torch":>9} {"torch+cudnn.benchmark":>22} {"dp+cudnn.benchmark":>19} {"ratio":>6}')
        for m in models:
            dp, th, thb = median(rates(m, 'dp')), median(rates(m, 'torch')), median(rates(m, 'torch_cudnn_benchmark'))
            info = infos.get(m) or {}
            batch = next((r['result'].get('batch_size') for r in runs if r['model'] == m and r['rc'] == 0
                          and isinstance(r.get('result'), dict)), None)
            ratio = dp / th if dp and th else None
            tried_thb = any(r['model'] == m and r['impl'] == 'torch_cudnn_benchmark' for r in runs)
            dpb = median(rates(m, 'dp_cudnn_benchmark'))
            tried_dpb = any(r['model'] == m and r['impl'] == 'dp_cudnn_benchmark' for r in runs)
            ratio_b = dpb / thb if dpb and thb else None
            print(f'{m:22} {fmt(info.get("params")):>9} {fmt(batch, "{}"):>5} {fmt(dp):>13} {fmt(th):>16} '
                  f'{fmt(ratio, "{:.2f}x"):>9} {fmt(thb) if tried_thb else "-":>22} '
                  f'{fmt(dpb) if tried_dpb else "-":>19} {fmt(ratio_b, "{:.2f}x") if tried_dpb else "-":>6}')
            out['models'][m] = {'params': info.get('params'), 'params_match_dp': info.get('matches_dp'),
                                'batch_size': batch, 'dp_samples_per_second': dp, 'torch_samples_per_second': th,
                                'dp_over_torch': round(ratio, 3) if ratio else None,
                                'torch_cudnn_benchmark_samples_per_second': thb,
                                'dp_cudnn_benchmark_samples_per_second': dpb,
                                'dp_rounds': rates(m, 'dp'), 'torch_rounds': rates(m, 'torch')}
    if section in ('large_mlp', 'all'):
        info = infos.get('large_mlp') or {}
        macs = info.get('linear_macs_per_sample')
        dp, th = median(rates('large_mlp', 'dp')), median(rates('large_mlp', 'torch'))
        batch = next((r['result'].get('batch_size') for r in runs if r['model'] == 'large_mlp' and r['rc'] == 0
                      and isinstance(r.get('result'), dict)), None)
        # A training step: forward, input gradient and weight gradient, 2 FLOPs per MAC each.
        tf = lambda sps: sps * 6 * macs / 1e12 if sps and macs else None
        ref = mm['mm']['tflops'] if mm and 'mm' in mm else None
        train3 = mm.get('training_products_tflops') if mm else None
        pct = lambda v: 100 * v / ref if v and ref else None
        print(f'large MLP ({fmt(macs, "{:,}")} linear MACs per sample, batch {fmt(batch, "{}")}; '
              f'FLOPs per step = 6 x batch x MACs)')
        table = [('cuBLAS fp32 torch.mm [B,4096]x[4096,4096]', ref),
                 ("cuBLAS fp32, a linear layer's 3 products", train3),
                 ('dp training step (incl. host->GPU copy)', tf(dp)),
                 ('torch eager training step (same)', tf(th))]
        print(f'  {"what":44} {"TFLOP/s":>9} {"% of mm":>8}')
        for label, v in table:
            print(f'  {label:44} {fmt(v, "{:.2f}"):>9} {fmt(pct(v), "{:.0f}%"):>8}')
        out['large_mlp'] = {'linear_macs_per_sample': macs, 'batch_size': batch, 'dp_samples_per_second': dp,
                            'torch_samples_per_second': th, 'dp_tflops': tf(dp), 'torch_tflops': tf(th),
                            'mm_tflops': ref, 'training_products_tflops': train3,
                            'dp_percent_of_mm': pct(tf(dp)), 'torch_percent_of_mm': pct(tf(th)), 'mm': mm}
    if section in ('precision', 'all'):
        # Mixed precision: every variant run per model (impl names say which:
        # dp_bf16*, torch_* with autocast), the best dp one against the best
        # PyTorch one; the large MLP's bf16 step against a bare bf16 torch.mm.
        keyed = [r for r in runs if 'bf16' in r['impl'] or 'fp16' in r['impl']]
        out['precision'] = {}
        for key in dict.fromkeys((r['model'], (r.get('result') or {}).get('batch_size')) for r in keyed if r['rc'] == 0):
            m, batch = key
            impls = list(dict.fromkeys(r['impl'] for r in keyed if r['model'] == m))
            med = {i: median([r['result']['samples_per_second'] for r in keyed if r['model'] == m and r['impl'] == i
                              and r['rc'] == 0 and (r.get('result') or {}).get('batch_size') == batch]) for i in impls}
            dp_best = max((v for i, v in med.items() if i.startswith('dp') and v), default=None)
            th_best = max((v for i, v in med.items() if i.startswith('torch') and v), default=None)
            print(f'{m}, batch {batch}: ' + ', '.join(f'{i} {fmt(v)}' for i, v in med.items()) +
                  f'; best dp / best torch {fmt(dp_best / th_best if dp_best and th_best else None, "{:.2f}x")}')
            out['precision'][f'{m}@{batch}'] = {'samples_per_second': med, 'dp_over_torch_best':
                                                dp_best / th_best if dp_best and th_best else None}
        mm16 = next((r.get('result') for r in rows if r['kind'] == 'mm_bf16'), None)
        info = infos.get('large_mlp') or {}
        macs = info.get('linear_macs_per_sample')
        dp16 = median([r['result']['samples_per_second'] for r in keyed if r['model'] == 'large_mlp'
                       and r['impl'].startswith('dp') and r['rc'] == 0])
        if mm16 and macs and dp16:
            step = dp16 * 6 * macs / 1e12
            ref = mm16['training_products_tflops']
            print(f'large MLP bf16: dp step {step:.1f} TFLOP/s, bare bf16 torch.mm (the 3 products) {ref:.1f}: '
                  f'{100 * step / ref:.0f}% (target >= 90%)')
            out['precision']['large_mlp_vs_mm'] = {'dp_tflops': step, 'mm_tflops': ref}
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=2)
            f.write('\n')
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest='cmd', required=True)
    i = sub.add_parser('info')
    i.add_argument('model')
    i.add_argument('--dp-lib', help='libdp.so: check the parameter tensors against dp')
    t = sub.add_parser('train')
    t.add_argument('model')
    t.add_argument('--batch-size', type=int, default=256)
    t.add_argument('--steps', type=int, default=50)
    t.add_argument('--warmup', type=int, default=10)
    t.add_argument('--optimizer', default='{"type": "sgd", "lr": 0.01, "momentum": 0.9}')
    t.add_argument('--device', default='cuda')
    t.add_argument('--cudnn-benchmark', action='store_true')
    t.add_argument('--tf32', action='store_true', help='allow TF32 (matmul and cuDNN)')
    t.add_argument('--amp', choices=['bf16', 'fp16'], help='torch.autocast to this dtype (fp16 with a GradScaler)')
    t.add_argument('--channels-last', action='store_true', help='channels_last model and inputs')
    t.add_argument('--compile', action='store_true', help='torch.compile the model')
    m = sub.add_parser('mm')
    m.add_argument('--m', type=int, default=8192)
    m.add_argument('--k', type=int, default=4096)
    m.add_argument('--n', type=int, default=4096)
    m.add_argument('--iters', type=int, default=50)
    m.add_argument('--device', default='cuda')
    m.add_argument('--dtype', choices=['fp32', 'bf16', 'fp16'], default='fp32')
    r = sub.add_parser('report')
    r.add_argument('results')
    r.add_argument('--section', choices=['models', 'large_mlp', 'precision', 'all'], default='all')
    r.add_argument('--json')
    args = p.parse_args()
    return {'info': cmd_info, 'train': cmd_train, 'mm': cmd_mm, 'report': cmd_report}[args.cmd](args)


if __name__ == '__main__':
    sys.exit(main())
