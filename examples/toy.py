#!/usr/bin/env python3
"""The tutorial's toy through dp's Python binding, line for line what
examples/toy (toy.c) prints: a random dataset of 100 samples of size 5,
batches of 30 in shuffled order, one linear layer 5 -> 2, run over the
devices given as the first argument (default: cpu:0,cpu:1).

    examples/toy.py cpu:0,cpu:1,cpu:2 [path/to/shape_probe.so]

As in the tutorial, each replica prints its "In Model" line from inside its
own forward: the model ends with the shape_probe plugin (plugins/shape_probe),
found as the second argument, else "shape_probe" in DP_PLUGIN_PATH, else
../plugins/shape_probe.so next to libdp.so (the build tree's layout). Without
the plugin the lines are printed here, from DataParallel.last_split(). No
NumPy needed.
"""
import ctypes
import os
import sys

try:
    import dp
except ImportError:  # a source checkout: the package is in bindings/python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'bindings', 'python'))
    import dp

INPUT_SIZE, OUTPUT_SIZE, BATCH_SIZE, DATA_SIZE = 5, 2, 30, 100

rng_state = 42


def next_uniform():  # the same generator as toy.c
    global rng_state
    rng_state = (rng_state * 6364136223846793005 + 1442695040888963407) & (2**64 - 1)
    return (rng_state >> 11) / 9007199254740992.0


def load_probe(ctx, given):
    """shape_probe: the given path, else DP_PLUGIN_PATH, else next to libdp."""
    if given:
        ctx.load_plugin(given)
        return True
    if os.environ.get('DP_PLUGIN_PATH'):
        try:
            ctx.load_plugin('shape_probe')
            return True
        except dp.PluginError:
            pass
    path = os.path.join(os.path.dirname(os.path.realpath(dp.library_path)), '..', 'plugins', 'shape_probe.so')
    try:
        ctx.load_plugin(path)
        return True
    except dp.PluginError:
        return False


def main():
    devices = sys.argv[1] if len(sys.argv) > 1 else 'cpu:0,cpu:1'
    data = [[next_uniform() * 2 - 1 for _ in range(INPUT_SIZE)] for _ in range(DATA_SIZE)]
    order = list(range(DATA_SIZE))
    for i in range(DATA_SIZE - 1, 0, -1):  # shuffle, as DataLoader(shuffle=True)
        k = int(next_uniform() * (i + 1))
        order[i], order[k] = order[k], order[i]

    ctx = dp.Context()
    probe = load_probe(ctx, sys.argv[2] if len(sys.argv) > 2 else None)
    layers = [{'type': 'linear', 'out_features': OUTPUT_SIZE, 'name': 'fc'}]
    if probe:
        layers.append({'type': 'shape_probe', 'inputs': ['input', 'fc']})
    model = dp.Model({'seed': 0, 'input': {'shape': [INPUT_SIZE]}, 'layers': layers}, ctx=ctx)
    model = dp.DataParallel(model, devices)
    if model.num_devices > 1:
        print(f"Let's use {model.num_devices} devices!", flush=True)

    libc = ctypes.CDLL(None)  # the plugin writes to C's stdout: flush it before our own lines
    for i in range(0, DATA_SIZE, BATCH_SIZE):
        batch = [data[j] for j in order[i:i + BATCH_SIZE]]
        input = dp.tensor(batch, ctx=ctx)
        output = model(input)  # the replicas print
        libc.fflush(None)
        if not probe:
            for rows in model.last_split():
                print(f'\tIn Model: input size [{rows}, {INPUT_SIZE}] output size [{rows}, {OUTPUT_SIZE}]')
        print(f'Outside: input size [{input.shape[0]}, {INPUT_SIZE}] output_size [{output.shape[0]}, '
              f'{output.shape[1]}]', flush=True)


if __name__ == '__main__':
    try:
        main()
    except dp.Error as e:
        print(f'toy.py: {e}', file=sys.stderr)
        sys.exit(1)
