#!/usr/bin/env python3
"""dp against PyTorch on the CPU, one command: training samples/s of the same
model, batch, optimizer (SGD, lr 0.01, momentum 0.9) and number of threads,
measured side by side in interleaved rounds. The machine is shared and noisy:
the ratios (each the median of the per-round dp/PyTorch ratios, the two runs
of a pair measured back to back) are the result, not the absolute numbers.

Models: MLP 784-512-256-10 and MLP 784-256-10 (relu, batch 256), and
examples/fashion_mnist_cnn.json (batch 64), rebuilt in PyTorch from the JSON
(bench/torch_gpu.py's builder). Synthetic data, one fixed batch. Variants:
  1 thread    dp "cpu:0"                        PyTorch set_num_threads(1)
  2 devices   dp "cpu:0,cpu:1", 1 thread each   PyTorch set_num_threads(2)
  2 threads   dp "cpu:0", 2 threads per device  PyTorch set_num_threads(2)
Also printed: the machine's ceiling (the same sgemm work on two threads at
once against one, through the oneDNN sgemm dp links), what dp's products run
on (dp.device_name('cpu', 0): oneDNN's version and instruction set;
ONEDNN_MAX_CPU_ISA caps it) and what PyTorch computes with (torch.__config__.show(): MKL, oneDNN).

PyTorch runs twice: as the environment has it, and (unless --no-passive, or
OMP_WAIT_POLICY=PASSIVE is set already) in a second worker with
OMP_WAIT_POLICY=PASSIVE. On a machine busy with other work, libgomp's
spinning idle threads can make PyTorch's 2-thread steps tens of times slower
than its 1-thread steps; the passive column shows PyTorch without that.

    ../shared/tools/torch-venv.sh /root/.cache/dp-torch      # once: a venv with torch
    eval "$(../shared/tools/torch-venv.sh /root/.cache/dp-torch --env)"
    "$TORCH_PY" bench/torch_cpu.py [--dp-build build] [--torch-python "$TORCH_PY"]
        [--rounds 3] [--seconds 1.5] [--models mlp512,mlp256,cnn] [--no-passive]
        [--json OUT.json]

--dp-build (or DP_BUILD; default build/) is a dp build tree with
src/libdp.so; --torch-python (or TORCH_PY; default this interpreter) is a
Python with torch. dp and PyTorch run in two separate worker processes (dp's
through bindings/python, needing NumPy), so neither's BLAS or thread pools
see the other's; only one of them computes at a time. PyTorch is used by this
benchmark only, never by dp.
"""
import argparse
import ctypes
import glob
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OPTIMIZER = {'type': 'sgd', 'lr': 0.01, 'momentum': 0.9}


def mlp(*widths):
    layers = []
    for w in widths[1:-1]:
        layers += [{'type': 'linear', 'out_features': w}, {'type': 'relu'}]
    layers.append({'type': 'linear', 'out_features': widths[-1]})
    return {'seed': 0, 'input': {'shape': [widths[0]]}, 'layers': layers, 'loss': {'type': 'cross_entropy'}}


def models(names):
    sys.path.insert(0, HERE)
    from torch_gpu import load_model_json  # plain JSON reading, no torch
    table = {'mlp512': ('MLP 784-512-256-10', mlp(784, 512, 256, 10), 256),
             'mlp256': ('MLP 784-256-10', mlp(784, 256, 10), 256),
             'cnn': ('Fashion-MNIST CNN', load_model_json(os.path.join(ROOT, 'examples', 'fashion_mnist_cnn.json')), 64)}
    return [(n,) + table[n] for n in names]


# dp variant -> (devices, threads per device); PyTorch variant -> threads
DP_VARIANTS = {'1 thread': ('cpu:0', 1), '2 devices': ('cpu:0,cpu:1', 1), '2 threads': ('cpu:0', 2)}
TORCH_VARIANTS = {'1 thread': 1, '2 devices': 2, '2 threads': 2}

# ----------------------------------------------------------------- workers --
# A worker reads one JSON request a line on stdin and answers one JSON line on
# stdout: {"cmd": "setup", "models": [[key, spec, batch], ...]}, {"cmd": "run",
# "model": key, "variant": name, "seconds": s}, {"cmd": "ceiling"}, {"cmd": "info"}.


def synthetic(spec, batch, np):
    rng = np.random.default_rng(0)
    x = (rng.random([batch] + list(spec['input']['shape']), dtype=np.float32) * 2 - 1).astype(np.float32)
    return x, (np.arange(batch) % 10).astype(np.int64)


def timed_runner(step, batch, seconds):
    """(run(steps) -> samples/s, steps for about `seconds`), after warm-up."""
    for _ in range(3):
        step()
    n, t0 = 0, time.perf_counter()
    while n < 3 or time.perf_counter() - t0 < 0.3:
        step()
        n += 1
    per_step = (time.perf_counter() - t0) / n

    def run(steps):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return batch * steps / (time.perf_counter() - t0)
    return run, max(3, round(seconds / per_step))


def loaded_path(fragment):
    with open('/proc/self/maps') as f:
        for line in f:
            p = line.split()[-1]
            if fragment in os.path.basename(p):
                return p
    return None


def sgemm_ceiling(sgemm_in_thread, reps=150):
    """2 x (one thread's time for `reps` products) / (time for two threads doing
    `reps` each at once): 2.0 is perfect scaling on two cores."""
    def work():
        for _ in range(reps):
            sgemm_in_thread()
    t0 = time.perf_counter()
    work()
    one = time.perf_counter() - t0
    ts = [threading.Thread(target=work) for _ in range(2)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return 2 * one / (time.perf_counter() - t0)


def dp_worker():
    import numpy as np
    import dp
    state, info = {}, {}

    def gemm_library():
        lib_path = os.environ['DP_LIBRARY']
        ldd = subprocess.run(['ldd', lib_path], capture_output=True, text=True).stdout
        found = {name: re.search(r'(' + name + r'\S*)\s+=>\s+(\S+)', ldd) for name in ('libdnnl', 'libgomp')}
        libs = {name: ctypes.CDLL(loaded_path(name) or m.group(2)) for name, m in found.items()}
        return libs, {'ldd': '; '.join(m.group(0) for m in found.values()),
                      'real_path': os.path.realpath(loaded_path('libdnnl') or found['libdnnl'].group(2)),
                      'description': dp.device_name('cpu', 0).split(' of ', 1)[-1],
                      'ONEDNN_MAX_CPU_ISA': os.environ.get('ONEDNN_MAX_CPU_ISA')}

    for line in sys.stdin:
        req = json.loads(line)
        if req['cmd'] == 'setup':
            for key, spec, batch in req['models']:
                x, y = synthetic(spec, batch, np)
                xt, yt = dp.from_numpy(x), dp.from_numpy(y)
                for variant, (devices, threads) in DP_VARIANTS.items():
                    group = dp.DataParallel(dp.Model(spec), devices)
                    group.set_threads_per_device(threads)
                    opt = dp.Optimizer(group, OPTIMIZER)
                    step = (lambda g, o, x, y: lambda: g.train_step(o, x, y))(group, opt, xt, yt)
                    state[key, variant] = (group, opt) + timed_runner(step, batch, req['seconds'])
            libs, info = gemm_library()
            state['blas'] = libs
            out = {'ok': True, 'params': {k: [list(shape) for _, shape in dp.Model(s).parameter_info()]
                                          for k, s, _ in req['models']}}
        elif req['cmd'] == 'run':
            _, _, run, steps = state[req['model'], req['variant']]
            out = {'rate': run(steps), 'steps': steps}
        elif req['cmd'] == 'ceiling':
            libs, M, N, K = state['blas'], 128, 512, 784  # bench/mlp.cpp's hardware_scaling()
            dnnl, gomp = libs['libdnnl'], libs['libgomp']
            i64, f = ctypes.c_int64, ctypes.c_float
            dnnl.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, f, ctypes.c_void_p, i64,
                                        ctypes.c_void_p, i64, f, ctypes.c_void_p, i64]

            def one_thread_work():
                gomp.omp_set_num_threads(1)  # this thread's OpenMP limit, as libdp sets it around its products
                a, b, c = np.ones((M, K), np.float32), np.ones((K, N), np.float32), np.zeros((M, N), np.float32)
                return lambda: dnnl.dnnl_sgemm(b'N', b'N', M, N, K, 1.0, a.ctypes.data, K, b.ctypes.data, N,
                                               0.0, c.ctypes.data, N)  # row major, no transposes; GIL released
            local = threading.local()

            def sgemm():
                if not hasattr(local, 'fn'):
                    local.fn = one_thread_work()
                local.fn()
            out = {'ceiling': sgemm_ceiling(sgemm)}
        elif req['cmd'] == 'info':
            out = info
        print(json.dumps(out), flush=True)


def torch_worker():
    import numpy as np
    import torch
    sys.path.insert(0, HERE)
    from torch_gpu import build_model, make_loss, make_optimizer
    state = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req['cmd'] == 'setup':
            params = {}
            for key, spec, batch in req['models']:
                x, y = (torch.from_numpy(a) for a in synthetic(spec, batch, np))
                for threads in sorted(set(TORCH_VARIANTS.values())):
                    torch.set_num_threads(threads)
                    torch.manual_seed(0)
                    model = build_model(spec)
                    model.train()
                    loss_fn, _ = make_loss(spec)
                    opt = make_optimizer(model.parameters(), OPTIMIZER)

                    def step(model=model, opt=opt, loss_fn=loss_fn, x=x, y=y):
                        opt.zero_grad(set_to_none=True)
                        loss = loss_fn(model(x), y)
                        loss.backward()
                        opt.step()
                        return loss.item()  # dp returns the loss every step
                    state[key, threads] = (model, opt) + timed_runner(step, batch, req['seconds'])
                    params[key] = [list(p.shape) for p in model.parameters()]
            out = {'ok': True, 'params': params}
        elif req['cmd'] == 'run':
            threads = TORCH_VARIANTS[req['variant']]
            torch.set_num_threads(threads)
            _, _, run, steps = state[req['model'], threads]
            out = {'rate': run(steps), 'steps': steps, 'threads': torch.get_num_threads()}
        elif req['cmd'] == 'info':
            show = torch.__config__.show()
            keep = [ln.strip() for ln in show.splitlines()
                    if re.search(r'MKL|oneDNN|OneDNN|MKLDNN|BLAS_INFO|LAPACK_INFO|CPU capability|OpenMP|USE_OPENMP',
                                 ln) and not ln.strip().startswith('- Build settings')]
            blas = re.search(r'BLAS_INFO=(\w+)', show)
            out = {'version': torch.__version__, 'config': keep, 'blas_info': blas.group(1) if blas else None,
                   'mkl': torch.backends.mkl.is_available(), 'mkldnn': torch.backends.mkldnn.is_available(),
                   'cpu_capability': torch.backends.cpu.get_cpu_capability(),
                   'parallel_info': [ln.strip() for ln in torch.__config__.parallel_info().splitlines()
                                     if re.search(r'ATen parallel backend|MKL_NUM_THREADS|OMP_NUM_THREADS', ln)]}
        print(json.dumps(out), flush=True)


class Worker:
    def __init__(self, kind, python, env):
        self.kind = kind
        self.p = subprocess.Popen([python, os.path.abspath(__file__), '--worker', kind], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env, bufsize=1)

    def ask(self, **req):
        self.p.stdin.write(json.dumps(req) + '\n')
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f'torch_cpu.py: the {self.kind} worker died (its stderr is above)')
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait()


# ------------------------------------------------------------------ driver --


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--dp-build', default=os.environ.get('DP_BUILD', os.path.join(ROOT, 'build')))
    p.add_argument('--torch-python', default=os.environ.get('TORCH_PY', sys.executable))
    p.add_argument('--dp-python', default=sys.executable, help='a Python with NumPy for the dp worker')
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--seconds', type=float, default=1.5, help='about this long per timed run')
    p.add_argument('--models', default='mlp512,mlp256,cnn')
    p.add_argument('--no-passive', action='store_true',
                   help='skip the second PyTorch worker (OMP_WAIT_POLICY=PASSIVE)')
    p.add_argument('--json', help='write every rate and the medians here')
    p.add_argument('--worker', choices=['dp', 'torch'], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker == 'dp':
        return dp_worker()
    if args.worker == 'torch':
        return torch_worker()

    lib = os.path.abspath(os.path.join(args.dp_build, 'src', 'libdp.so'))
    if not os.path.exists(lib):
        raise SystemExit(f'{lib}: no dp build (meson setup build -Dcuda=disabled && ninja -C build)')
    dp_env = dict(os.environ, DP_LIBRARY=lib,
                  PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, 'bindings', 'python'),
                                                           os.environ.get('PYTHONPATH')])))
    # The CUDA-enabled torch wheel needs NVIDIA's pip libraries on the library path even on the CPU
    # (what `torch-venv.sh --env` exports); added here in case the caller did not.
    venv = os.path.dirname(os.path.dirname(args.torch_python))
    nv = glob.glob(os.path.join(venv, 'lib', 'python3*', 'site-packages', 'nvidia', '*', 'lib'))
    torch_env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(nv + [os.environ.get('LD_LIBRARY_PATH', '')]))

    todo = models(args.models.split(','))
    setup = [[key, spec, batch] for key, _, spec, batch in todo]
    # Sides: dp; PyTorch as the caller's environment has it; PyTorch with OpenMP's idle threads
    # sleeping instead of spinning (on a loaded machine libgomp's spinning can cost PyTorch's
    # 2-thread runs a scheduler time slice per parallel region).
    sides = {'dp': Worker('dp', args.dp_python, dp_env),
             'torch': Worker('torch', args.torch_python, torch_env)}
    if not args.no_passive and os.environ.get('OMP_WAIT_POLICY', '').upper() != 'PASSIVE':
        sides['torch_passive'] = Worker('torch', args.torch_python, dict(torch_env, OMP_WAIT_POLICY='PASSIVE'))
    t_start = time.perf_counter()
    shapes = {name: w.ask(cmd='setup', models=setup, seconds=args.seconds)['params'] for name, w in sides.items()}
    blas, tinfo = sides['dp'].ask(cmd='info'), sides['torch'].ask(cmd='info')

    rates = {}   # (model, variant, side) -> [samples/s per round]
    ratios = {}  # (model, variant, side) -> [dp/side per round, the runs back to back]
    ceilings = []
    names = list(sides)
    for r in range(args.rounds):
        ceilings.append(sides['dp'].ask(cmd='ceiling')['ceiling'])
        order = names[r % len(names):] + names[:r % len(names)]  # each side first in turn
        for key, _, _, _ in todo:
            for variant in DP_VARIANTS:
                got = {}
                for name in order:
                    got[name] = sides[name].ask(cmd='run', model=key, variant=variant)['rate']
                    rates.setdefault((key, variant, name), []).append(got[name])
                for name in names[1:]:
                    ratios.setdefault((key, variant, name), []).append(got['dp'] / got[name])
        print(f'round {r + 1}/{args.rounds} done ({time.perf_counter() - t_start:.0f} s)', file=sys.stderr)
    ceilings.append(sides['dp'].ask(cmd='ceiling')['ceiling'])
    for w in sides.values():
        w.close()

    med = statistics.median
    print(f'dp vs PyTorch {tinfo["version"]} on the CPU ({os.cpu_count()} cores, load average '
          f'{os.getloadavg()[0]:.1f}): training samples/s, SGD lr 0.01 momentum 0.9, synthetic data; '
          f'{args.rounds} interleaved rounds of ~{args.seconds:g} s runs; rates are medians, ratios the median '
          f'of per-round dp/PyTorch')
    print(f'dp products: {blas["description"]}, ONEDNN_MAX_CPU_ISA='
          f'{blas["ONEDNN_MAX_CPU_ISA"] or "(unset)"}; {blas["real_path"]} (libdp.so: {blas["ldd"]})')
    print(f'PyTorch: BLAS {tinfo["blas_info"]}, MKL {tinfo["mkl"]}, oneDNN {tinfo["mkldnn"]}, '
          f'CPU capability {tinfo["cpu_capability"]}; ' + '; '.join(tinfo['parallel_info']) +
          f'; OMP_WAIT_POLICY={os.environ.get("OMP_WAIT_POLICY", "(unset)")}')
    for ln in tinfo['config']:
        print(f'  torch config: {ln}')
    print(f'machine ceiling: 2 threads of independent sgemm (dp\'s oneDNN sgemm) run {med(ceilings):.2f}x one '
          f'(before each round and at the end: {", ".join(f"{c:.2f}" for c in ceilings)})')
    print()
    passive = 'torch_passive' in sides
    print(f'{"model":19} {"batch":>5} {"variant":10} {"dp":>8} {"PyTorch":>8} {"dp/PT":>6}' +
          (f' {"PT pass.":>8} {"dp/PTp":>6}' if passive else '') + f' {"dp x1t":>6} {"PT x1t":>6}' +
          (f' {"PTp x1t":>7}' if passive else ''))
    out = {'rounds': args.rounds, 'seconds': args.seconds, 'ceiling': ceilings, 'gemm': blas, 'torch': tinfo,
           'results': []}
    for key, label, spec, batch in todo:
        for name in names[1:]:
            if shapes[name][key] != shapes['dp'][key]:
                print(f'warning: {label}: parameter shapes differ: dp {shapes["dp"][key]}, {name} '
                      f'{shapes[name][key]}', file=sys.stderr)
        n_params = sum(math.prod(s) for s in shapes['dp'][key])
        for variant in DP_VARIANTS:
            m = {name: med(rates[key, variant, name]) for name in names}
            one = {name: med(rates[key, '1 thread', name]) for name in names}
            q = {name: med(ratios[key, variant, name]) for name in names[1:]}
            line = f'{label:19} {batch:5} {variant:10} {m["dp"]:8.0f} {m["torch"]:8.0f} {q["torch"]:5.2f}x'
            if passive:
                line += f' {m["torch_passive"]:8.0f} {q["torch_passive"]:5.2f}x'
            line += f' {m["dp"] / one["dp"]:5.2f}x {m["torch"] / one["torch"]:5.2f}x'
            if passive:
                line += f' {m["torch_passive"] / one["torch_passive"]:6.2f}x'
            print(line)
            out['results'].append({'model': key, 'label': label, 'batch_size': batch, 'variant': variant,
                                   'params': n_params, 'dp_devices': DP_VARIANTS[variant][0],
                                   'dp_threads_per_device': DP_VARIANTS[variant][1],
                                   'torch_threads': TORCH_VARIANTS[variant], 'samples_per_second': m,
                                   'dp_over': q, 'rounds': {n: rates[key, variant, n] for n in names},
                                   'ratio_rounds': {n: ratios[key, variant, n] for n in names[1:]}})
    print('(PT pass.: PyTorch with OMP_WAIT_POLICY=PASSIVE; x1t: each side against its own 1-thread rate, to read '
          'against the machine ceiling)')
    print(json.dumps({'ceiling': round(med(ceilings), 3), 'dp_products': blas['description'],
                      'dp_over_torch': {f'{r["model"]}/{r["variant"]}': {k: round(v, 3) for k, v in r['dp_over'].items()}
                                        for r in out['results']}}))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(out, f, indent=2)
            f.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
