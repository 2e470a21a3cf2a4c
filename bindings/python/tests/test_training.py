"""Training, data, checkpoints, and a Python-driven run bitwise equal to `dp train`."""
import gzip
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import dp

MLP = {'seed': 3, 'input': {'shape': [1, 28, 28]},
       'layers': [{'type': 'flatten'}, {'type': 'linear', 'out_features': 32}, {'type': 'batch_norm'},
                  {'type': 'relu'}, {'type': 'dropout', 'p': 0.1}, {'type': 'linear', 'out_features': 10}],
       'loss': {'type': 'cross_entropy'}}


def write_idx(folder, prefix, n, seed):
    """n random 28x28 images and labels as gzip IDX files, as MNIST ships."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    with gzip.open(os.path.join(folder, f'{prefix}-images-idx3-ubyte.gz'), 'wb') as f:
        f.write(struct.pack('>iiii', 2051, n, 28, 28) + images.tobytes())
    with gzip.open(os.path.join(folder, f'{prefix}-labels-idx1-ubyte.gz'), 'wb') as f:
        f.write(struct.pack('>ii', 2049, n) + labels.tobytes())
    return images, labels


@pytest.fixture(scope='module')
def mnist_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp('mnist')
    write_idx(str(d), 'train', 300, 1)
    write_idx(str(d), 't10k', 50, 2)
    return str(d)


def test_training_lowers_the_loss():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    m = dp.Model({'seed': 0, 'input': {'shape': [6]}, 'layers': [{'type': 'linear', 'out_features': 2}],
                  'loss': {'type': 'cross_entropy'}})
    g = dp.DataParallel(m, 'cpu:0,cpu:1')
    opt = dp.SGD(g, lr=0.5)
    first = g.train_step(opt, x, y)
    for _ in range(30):
        last = g.train_step(opt, x, y)
    assert last < first / 2
    g.eval()
    loss, correct = g.evaluate(x, y)
    assert correct >= 60 and abs(loss - last) < 0.1
    opt.lr = 0.25
    assert opt.lr == 0.25


def test_lower_level_steps_match_train_step():
    """zero_grad, forward, the MSE gradient, backward, step by hand == train_step."""
    spec = {'seed': 0, 'input': {'shape': [4]}, 'layers': [{'type': 'linear', 'out_features': 3}],
            'loss': {'type': 'mse'}}
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    t = rng.standard_normal((8, 3)).astype(np.float32)
    a, b = dp.DataParallel(dp.Model(spec), 'cpu:0,cpu:1'), dp.DataParallel(dp.Model(spec), 'cpu:0,cpu:1')
    oa, ob = dp.SGD(a, lr=0.1), dp.SGD(b, lr=0.1)
    a.train_step(oa, x, t)
    b.zero_grad()
    out = b(x).numpy()
    b.backward((2 * (out - t) / out.size).astype(np.float32))
    ob.step()
    assert np.allclose(a.model.parameters(), b.model.parameters(), rtol=1e-5, atol=1e-7)


def test_accumulation_and_clipping():
    """4 batches of 5 with loss_scale 1/4 == one batch of 20; clipping with
    infinity measures the norm, with half of it halves the step."""
    spec = {'seed': 0, 'input': {'shape': [6]}, 'layers': [{'type': 'linear', 'out_features': 3}],
            'loss': {'type': 'cross_entropy'}}
    rng = np.random.default_rng(2)
    x = rng.standard_normal((20, 6)).astype(np.float32)
    y = rng.integers(0, 3, 20)
    big, acc = dp.DataParallel(dp.Model(spec), 'cpu:0'), dp.DataParallel(dp.Model(spec), 'cpu:0,cpu:1,cpu:2')
    ob, oa = dp.SGD(big, lr=0.5).set_clip_grad_norm(float('inf')), dp.SGD(acc, lr=0.5)
    loss = big.train_step(ob, x, y)
    losses = [acc.forward_backward(x[i:i + 5], y[i:i + 5], loss_scale=0.25) for i in range(0, 20, 5)]
    oa.step()
    assert np.isclose(sum(losses) / 4, loss, rtol=1e-5)
    assert np.allclose(acc.module.parameters(), big.module.parameters(), rtol=1e-5, atol=1e-7)
    norm = ob.grad_norm
    assert norm > 0
    with pytest.raises(dp.InvalidArgumentError):
        oa.grad_norm  # not measured
    half = dp.DataParallel(dp.Model(spec), 'cpu:0')
    oh = dp.SGD(half, lr=0.5).set_clip_grad_norm(norm / 2)
    half.train_step(oh, x, y)
    start = dp.Model(spec).parameters()
    assert np.allclose(half.module.parameters() - start, (big.module.parameters() - start) / 2, rtol=1e-4, atol=1e-7)


def test_grad_scaler():
    """PyTorch's names; with no overflow, bitwise the run without it (train_step
    and forward_backward with loss_scale * get_scale()); an overflowing scale
    skips steps and backs off; its state in the optimizer's state_dict; bad
    settings raise."""
    spec = {'seed': 0, 'input': {'shape': [6]}, 'layers': [{'type': 'linear', 'out_features': 8}, {'type': 'tanh'},
                                                           {'type': 'linear', 'out_features': 3}],
            'loss': {'type': 'cross_entropy'}}
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 6)).astype(np.float32)
    y = rng.integers(0, 3, 20)
    plain, scaled = dp.DataParallel(dp.Model(spec), 'cpu:0,cpu:1'), dp.DataParallel(dp.Model(spec), 'cpu:0,cpu:1')
    op, os_ = dp.Adam(plain, lr=0.01), dp.Adam(scaled, lr=0.01).set_grad_scaler(growth_interval=2)
    assert op.get_scale() == 1.0 and os_.get_scale() == 65536.0 and os_.get_growth_tracker() == 0
    for step in range(5):
        assert plain.train_step(op, x, y) == scaled.train_step(os_, x, y)
        plain.zero_grad()  # (a step leaves its gradients, unscaled: scaled ones must not be added to them)
        scaled.zero_grad()
        plain.forward_backward(x, y, loss_scale=1.0)
        scaled.forward_backward(x, y, loss_scale=os_.get_scale())
        op.step()
        os_.step()
        plain.zero_grad()
        scaled.zero_grad()
    assert np.array_equal(plain.module.parameters(), scaled.module.parameters())
    assert os_.get_scale() == 2.0 ** 21 and os_.skipped_steps == 0  # 10 steps, growing every other one

    # From 2^127 with inputs of 1e3 and MSE: the first steps overflow and are skipped.
    lin = {'seed': 1, 'input': {'shape': [6]}, 'layers': [{'type': 'linear', 'out_features': 1}], 'loss': {'type': 'mse'}}
    g = dp.DataParallel(dp.Model(lin), 'cpu:0')
    o = dp.SGD(g, lr=1e-10).set_grad_scaler(init_scale=2.0 ** 127, growth_interval=3)
    big = (rng.uniform(-1e3, 1e3, (16, 6))).astype(np.float32)
    before = g.module.parameters()
    g.train_step(o, big, np.zeros((16, 1), np.float32))
    assert o.skipped_steps == 1 and o.get_scale() == 2.0 ** 126 and np.array_equal(g.module.parameters(), before)
    for _ in range(30):
        g.train_step(o, big, np.zeros((16, 1), np.float32))
    sd = o.state_dict()
    assert sd['grad_scaler']['scale'] == o.get_scale() < 2.0 ** 112
    assert sd['grad_scaler']['skipped_steps'] == o.skipped_steps > 10
    assert sd['grad_scaler']['_growth_tracker'] == o.get_growth_tracker()
    fresh = dp.SGD(g, lr=1e-10).set_grad_scaler(init_scale=2.0 ** 127, growth_interval=3)
    fresh.load_state_dict(sd)
    assert (fresh.get_scale(), fresh.get_growth_tracker(), fresh.skipped_steps) == \
        (o.get_scale(), o.get_growth_tracker(), o.skipped_steps)
    # torch.amp.GradScaler.state_dict()'s own keys load too (no skipped_steps: 0).
    sd['grad_scaler'] = {'scale': 1024.0, 'growth_factor': 2.0, 'backoff_factor': 0.5, 'growth_interval': 3,
                         '_growth_tracker': 2}
    fresh.load_state_dict(sd)
    assert (fresh.get_scale(), fresh.get_growth_tracker(), fresh.skipped_steps) == (1024.0, 2, 0)

    with pytest.raises(dp.ModelError, match='/growth_factor'):
        o.set_grad_scaler(growth_factor=1.0)
    with pytest.raises(dp.ModelError, match='/init_scale'):
        o.set_grad_scaler(init_scale=0)
    with pytest.raises(TypeError):
        o.set_grad_scaler(growth_interval=2.5)
    assert o.set_grad_scaler(enabled=False).get_scale() == 1.0


def test_numeric_error_leaves_parameters():
    m = dp.Model({'seed': 0, 'input': {'shape': [2]}, 'layers': [{'type': 'linear', 'out_features': 2}],
                  'loss': {'type': 'mse'}})
    g = dp.DataParallel(m, 'cpu:0')
    before = m.parameters()
    with pytest.raises(dp.NumericError) as e:
        g.train_step(dp.SGD(g, lr=0.1), np.array([[np.inf, 1]], np.float32), np.zeros((1, 2), np.float32))
    assert e.value.status == 7 and np.array_equal(before, m.parameters())


def batches(loader):
    return [(x.numpy(copy=True), y.numpy(copy=True)) for x, y in loader]


def test_loader_semantics():
    x = np.arange(70, dtype=np.float32).reshape(35, 2)
    y = np.arange(35)
    ds = dp.Dataset.from_arrays(x, y)
    assert len(ds) == 35 and ds.sample_shape == (2,)
    loader = dp.DataLoader(ds, batch_size=10, shuffle=True, seed=5, num_workers=2)
    assert len(loader) == 4
    e0, e1 = batches(loader), batches(loader)
    assert [len(b[1]) for b in e0] == [10, 10, 10, 5]
    assert sorted(np.concatenate([b[1] for b in e0]).tolist()) == list(range(35))
    assert any(not np.array_equal(p[1], q[1]) for p, q in zip(e0, e1))  # a new order each epoch
    for bx, by in e0:
        assert np.array_equal(bx, x[by])
    # The order depends on (seed, epoch) only, not on the workers.
    again = dp.DataLoader(dp.Dataset.from_arrays(x, y, borrow=False), batch_size=10, shuffle=True, seed=5)
    assert all(np.array_equal(p[1], q[1]) for p, q in zip(e0, batches(again)))
    # Breaking off an epoch: the next iteration starts the next epoch, as PyTorch's.
    it = iter(loader)
    next(it)
    del it
    assert loader.position == (2, 1)
    list(loader)
    assert loader.position == (4, 0)
    assert len(dp.DataLoader(ds, batch_size=10, drop_last=True)) == 3


def test_callback_dataset_matches_arrays():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((23, 3, 2)).astype(np.float32)
    y = rng.integers(0, 4, 23)
    ref = batches(dp.DataLoader(dp.Dataset.from_arrays(x, y), batch_size=5, shuffle=True, seed=1))
    for workers in (0, 2):
        ds = dp.Dataset.from_callback(lambda i: (x[i], y[i]), len(x), (3, 2))
        got = batches(dp.DataLoader(ds, batch_size=5, shuffle=True, seed=1, num_workers=workers))
        assert len(got) == len(ref)
        for (a, b), (c, d) in zip(got, ref):
            assert np.array_equal(a, c) and np.array_equal(b, d)
    # float targets
    ds = dp.Dataset.from_callback(lambda i: (x[i], x[i, 0]), len(x), (3, 2), target_shape=(2,),
                                  target_dtype='float32')
    (bx, by), = batches(dp.DataLoader(ds, batch_size=23))
    assert by.dtype == np.float32 and np.array_equal(by, x[:, 0])


def test_datasets_refuse_what_a_model_call_refuses():
    """uint8 pixels through a dataset trained unscaled (0..255) where net(x)
    refuses them; a callback's HWC image for [C, H, W] was read as CHW, and a
    float target 0.7 became class 0: each refused with the reason."""
    x = np.arange(24, dtype=np.uint8).reshape(4, 3, 2)
    with pytest.raises(dp.ArgumentTypeError, match='uint8 values.*astype'):
        dp.Dataset.from_arrays(x, np.zeros(4, np.int64))
    assert len(dp.Dataset.from_arrays(x.astype(np.float32) / 255, np.zeros(4, np.int64))) == 4

    def first(get, **kw):
        return dp.DataLoader(dp.Dataset.from_callback(get, 4, (3, 2), **kw), batch_size=4).next_batch()
    with pytest.raises(dp.InvalidArgumentError, match='uint8 values'):
        first(lambda i: (x[i], 0))
    with pytest.raises(dp.InvalidArgumentError, match=r'shape \[2, 3\]; the sample shape is \[3, 2\]'):
        first(lambda i: (np.zeros((2, 3), np.float32), 0))
    with pytest.raises(dp.InvalidArgumentError, match='not a class index'):
        first(lambda i: (np.zeros((3, 2), np.float32), 0.7))
    bx, by = first(lambda i: (np.full(6, i, np.float32), np.float64(i)))  # flat, and a whole float: as before
    assert np.array_equal(np.asarray(bx)[:, 1, 1], [0, 1, 2, 3]) and np.array_equal(np.asarray(by), [0, 1, 2, 3])


def test_callback_errors_fail_the_batch():
    def get(i):
        if i == 7:
            raise KeyError('sample 7 is missing')
        return np.zeros(2, np.float32), 0
    loader = dp.DataLoader(dp.Dataset.from_callback(get, 10, (2,)), batch_size=4, num_workers=2)
    with pytest.raises(dp.InvalidArgumentError) as e:
        list(loader)
    assert 'index 7' in str(e.value) and 'KeyError' in str(e.value) and 'sample 7 is missing' in str(e.value)
    # skipped, as PyTorch does: iterating again continues after the failed batch
    assert loader.position == (0, 2)
    assert [len(y) for _, y in loader] == [2]
    # PyTorch's way of skipping bad samples: the same iterator goes on after the error
    it, got, errors = iter(loader), [], 0
    while True:
        try:
            _, y = next(it)
        except dp.InvalidArgumentError:
            errors += 1
            continue
        except StopIteration:
            break
        got.append(len(y))
    assert errors == 1 and got == [4, 2] and loader.position == (2, 0)


@pytest.mark.parametrize('workers', [0, 1, 2])
@pytest.mark.parametrize('stop', [KeyboardInterrupt, SystemExit])
def test_ctrl_c_in_a_callback_stops_the_loop(workers, stop):
    """KeyboardInterrupt (Ctrl-C while get_item runs) and SystemExit are the user's stop, not a bad
    sample: they come out of the loop as themselves, through the skip-bad-samples pattern above, as
    from a torch Dataset's __getitem__ (before, they were a skippable dp.InvalidArgumentError)."""
    def get(i):
        if i == 5:  # in every epoch: workers may call it for the next epoch's batch first
            raise stop('stop here')
        return np.zeros(2, np.float32), 0
    loader = dp.DataLoader(dp.Dataset.from_callback(get, 12, (2,)), batch_size=4, num_workers=workers)
    it, got = iter(loader), []
    with pytest.raises(stop, match='stop here'):
        while True:
            try:
                _, y = next(it)
            except dp.Error:
                continue
            except StopIteration:
                break
            got.append(len(y))
    assert got == [4]
    assert loader.position == (0, 2)  # past the interrupted batch, as a checkpoint saved now records
    # The loader is usable: the same iterator gives the next batch, then the epoch ends.
    assert len(next(it)[1]) == 4
    with pytest.raises(StopIteration):
        next(it)


def test_an_interrupt_read_ahead_and_never_taken_stays_with_its_sample():
    """A KeyboardInterrupt that a loader's workers met reading ahead, in a batch nobody took, is
    not raised by another loader's ordinary failure over the same dataset (it was: any next
    failure raised whatever interrupt the dataset held)."""
    import time
    state = {'bad': False}

    def get(i):
        if i == 9:
            raise KeyboardInterrupt('read ahead')
        if i == 1 and state['bad']:
            raise KeyError('sample 1 is missing')
        return np.zeros(2, np.float32), 0
    ds = dp.Dataset.from_callback(get, 12, (2,))
    a = dp.DataLoader(ds, batch_size=2, num_workers=2, prefetch=4)
    next(iter(a))
    for _ in range(200):  # the workers reach sample 9 (batch 4) on their own
        if ds._interrupts:
            break
        time.sleep(0.05)
    assert 9 in ds._interrupts
    a.close()
    state['bad'] = True
    b = dp.DataLoader(ds, batch_size=2)
    with pytest.raises(dp.InvalidArgumentError, match='sample 1 is missing'):
        list(b)


def test_a_loader_collected_inside_its_own_callback():
    """A garbage collection that runs inside a dataset callback on a loader's worker thread may free
    that DataLoader when a reference cycle is all that holds it: its destructor joins the worker
    threads, so this aborted the process ("Resource deadlock avoided"). Now the loader is destroyed
    later, outside any callback, and what it calls stays alive until then."""
    import gc
    import threading
    import time
    import weakref
    from dp import _data
    ref, armed, collected = [None], threading.Event(), threading.Event()

    def get(i):
        if i == 6 and armed.wait(20):  # a worker, assembling ahead, once the main thread let go
            # frees the loader: the cycle is all that holds it (a collection already running on
            # another thread makes gc.collect return at once, so until it is gone)
            for _ in range(500):
                gc.collect()
                if ref[0]() is None:
                    collected.set()
                    break
                time.sleep(0.01)
        return np.full(2, i, np.float32), i
    loader = dp.DataLoader(dp.Dataset.from_callback(get, 40, (2,)), batch_size=2, num_workers=2, prefetch=4)
    it = iter(loader)
    assert np.asarray(next(it)[1]).tolist() == [0, 1]
    loader.cycle = loader  # only the garbage collector can free it
    ref[0] = weakref.ref(loader)
    handle = loader._h.value
    # No automatic collection: one on the main thread could free the loader there first (then it is
    # destroyed at once, rightly, and nothing is deferred: CI's ASan run failed so once).
    gc.disable()
    try:
        del loader, it
        armed.set()  # the worker waiting at index 6 collects
        assert collected.wait(20)
    finally:
        gc.enable()
    assert handle in [h.value for h, _ in _data._deferred]  # not destroyed on the worker thread
    dp.DataLoader(dp.Dataset.from_arrays(np.zeros((2, 2), np.float32), np.zeros(2, np.int64)), batch_size=1).close()
    assert not _data._deferred


def test_a_reference_cycle_is_destroyed_children_first(monkeypatch):
    """dp.h: a context outlives its models and datasets, a model its groups, a group its optimizers
    and a dataset its loaders. A garbage collection of a reference cycle runs the finalizers of all it
    holds in any order (parents first, here: they were made first), which freed a dataset under its
    loader's running workers (a crash under ASan in CI) and a model under its group; the handles must
    still go children first."""
    import gc
    from dp import _lib
    order = []
    for name in ('context', 'model', 'group', 'optimizer', 'dataset', 'loader'):
        fn = getattr(_lib, name + '_destroy')
        monkeypatch.setattr(_lib, name + '_destroy', lambda h, fn=fn, name=name: (order.append(name), fn(h)))
    gc.collect()
    gc.disable()
    try:
        ctx = dp.Context()
        m = dp.Model(MLP, ctx=ctx)
        g = dp.DataParallel(m, 'cpu:0,cpu:1')
        o = dp.SGD(g, lr=0.1)
        ds = dp.Dataset.from_arrays(np.zeros((8, 1, 28, 28), np.float32), np.zeros(8, np.int64), ctx=ctx)
        ld = dp.DataLoader(ds, batch_size=2, num_workers=2)
        x, y = next(iter(ld))
        g.train_step(o, x, y)
        ctx.cycle = (ctx, m, g, o, ds, ld)  # only the garbage collector can free them
        del ctx, m, g, o, ds, ld, x, y
        assert order == []
        gc.collect()
    finally:
        gc.enable()
    assert sorted(order) == ['context', 'dataset', 'group', 'loader', 'model', 'optimizer']
    assert order.index('optimizer') < order.index('group') < order.index('model') < order.index('context')
    assert order.index('loader') < order.index('dataset') < order.index('context')


def test_checkpoints(tmp_path, mnist_dir):
    def setup():
        m = dp.Model(MLP)
        g = dp.DataParallel(m, 'cpu:0,cpu:1')
        o = dp.Adam(g, lr=0.01)
        ds = dp.Dataset.from_idx(os.path.join(mnist_dir, 'train-images-idx3-ubyte.gz'),
                                 os.path.join(mnist_dir, 'train-labels-idx1-ubyte.gz'))
        return m, g, o, dp.DataLoader(ds, batch_size=32, shuffle=True, num_workers=2)
    m, g, o, loader = setup()
    path = tmp_path / 'run.ckpt'
    rest = []
    for i, (x, y) in enumerate(loader):
        loss = g.train_step(o, x, y)
        if i == 3:  # saved mid-epoch, inside the loop
            dp.save_checkpoint(path, g, o, loader, {'note': 'four steps'})
        elif i > 3:
            rest.append(loss)
    meta = dp.checkpoint_metadata(path)
    assert meta['note'] == 'four steps' and meta['format'] == 'dp-checkpoint-1'
    m2, g2, o2, loader2 = setup()
    dp.load_checkpoint(path, g2, o2, loader2)
    rest2 = [g2.train_step(o2, x, y) for x, y in loader2]
    assert rest == rest2 and np.array_equal(m.parameters(), m2.parameters())
    assert np.array_equal(m.buffers(), m2.buffers())
    bad = tmp_path / 'bad.ckpt'
    bad.write_bytes(path.read_bytes()[:100])
    with pytest.raises(dp.IOError):
        dp.load_checkpoint(bad, g2, o2)
    m.save_safetensors(tmp_path / 'w.safetensors')
    m3 = dp.Model(MLP)
    m3.load_safetensors(tmp_path / 'w.safetensors')
    assert np.array_equal(m3.parameters(), m.parameters())


@pytest.mark.parametrize('devices', ['cpu:0', 'cpu:0,cpu:1,cpu:2'])
def test_python_run_equals_cli_run(tmp_path, mnist_dir, cli, devices):
    """Same model, data, loader and optimizer: the Python loop's parameters
    are bitwise those of `dp train --save`."""
    model_file = tmp_path / 'mlp.json'
    model_file.write_text(json.dumps(MLP))
    opt = {'type': 'adam', 'lr': 0.01}
    ckpt = tmp_path / 'cli.ckpt'
    subprocess.run([cli, 'train', str(model_file), '--data', f'mnist:{mnist_dir}', '--devices', devices,
                    '--epochs', '2', '--batch-size', '32', '--optimizer', json.dumps(opt), '--seed', '4',
                    '--workers', '2', '--save', str(ckpt)], check=True, capture_output=True, text=True)

    model = dp.Model(model_file)
    net = dp.DataParallel(model, devices)
    optimizer = dp.Optimizer(net, opt)
    norm = {'normalize': {'mean': [0.1307], 'std': [0.3081]}}  # what --data mnist uses
    train = dp.Dataset.from_idx(os.path.join(mnist_dir, 'train-images-idx3-ubyte.gz'),
                                os.path.join(mnist_dir, 'train-labels-idx1-ubyte.gz')).set_transform(norm)
    test = dp.Dataset.from_idx(os.path.join(mnist_dir, 't10k-images-idx3-ubyte.gz'),
                               os.path.join(mnist_dir, 't10k-labels-idx1-ubyte.gz')).set_transform(norm)
    loader = dp.DataLoader(train, batch_size=32, shuffle=True, num_workers=1, seed=4)
    for epoch in range(2):
        net.train()
        for x, y in loader:
            net.train_step(optimizer, x, y)
        net.eval()  # the CLI evaluates after each epoch (eval mode changes nothing)
        for x, y in dp.DataLoader(test, batch_size=1000):
            net.evaluate(x, y)

    ref_model = dp.Model(model_file)
    ref = dp.DataParallel(ref_model, 'cpu:0')
    dp.load_checkpoint(ckpt, ref)
    assert model.parameters().tobytes() == ref_model.parameters().tobytes()
    assert model.buffers().tobytes() == ref_model.buffers().tobytes()


def test_a_cifar_checkpoint_records_its_augmentation_and_a_python_reader_evaluates_as_dp_eval(tmp_path, cli):
    """README: a checkpoint of `dp train --data cifar10:DIR` records the crop and flip of its
    training inputs and the normalisation of its test inputs; a Python reader that prepares the
    test set from that record (dp.checkpoint_metadata, Dataset.set_transform) gets dp eval's
    loss, and plain [0, 1] pixels do not."""
    rng = np.random.default_rng(5)
    data = tmp_path / 'cifar'
    data.mkdir()
    for name, rows in [(f'data_batch_{i}.bin', 40) for i in range(1, 6)] + [('test_batch.bin', 60)]:
        records = np.zeros((rows, 1 + 3072), np.uint8)
        records[:, 0] = rng.integers(0, 10, rows)
        records[:, 1:] = rng.integers(0, 256, (rows, 3072))
        (data / name).write_bytes(records.tobytes())
    model = {'seed': 4, 'input': {'shape': [3, 32, 32]}, 'loss': {'type': 'cross_entropy'},
             'layers': [{'type': 'flatten'}, {'type': 'linear', 'out_features': 10}]}
    (tmp_path / 'model.json').write_text(json.dumps(model))
    run = lambda *a: subprocess.run([cli, *a], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    r = run('train', 'model.json', '--data', f'cifar10:{data}', '--epochs', '1', '--batch-size', '50',
            '--devices', 'cpu:0', '--workers', '0', '--save', 'c.ckpt')
    assert r.returncode == 0, r.stderr
    inputs = json.loads(dp.checkpoint_metadata(tmp_path / 'c.ckpt')['inputs'])
    train_t, test_t = inputs['train_transform'], inputs['test_transform']
    assert inputs['dataset'] == 'cifar10'
    assert train_t['random_crop'] == {'size': 32, 'padding': 4} and train_t['horizontal_flip'] == 0.5
    assert set(test_t) == {'normalize'} and test_t['normalize'] == train_t['normalize']
    r = run('eval', 'model.json', 'c.ckpt', '--data', f'cifar10:{data}', '--devices', 'cpu:0', '--workers', '0')
    assert r.returncode == 0, r.stderr
    want = json.loads(r.stdout.strip().splitlines()[-1])

    m = dp.Model(model)
    m.load_safetensors(tmp_path / 'c.ckpt')
    net = dp.DataParallel(m, devices='cpu:0')
    net.eval()

    def test_loss(transform):
        ds = dp.Dataset.from_cifar10([str(data / 'test_batch.bin')])
        if transform is not None:
            ds.set_transform(transform)
        x, y = next(iter(dp.DataLoader(ds, batch_size=60, num_workers=0)))
        loss, correct = net.evaluate(x, y)
        return loss, correct / 60

    loss, accuracy = test_loss(test_t)
    assert loss == pytest.approx(want['test_loss'], rel=1e-5) and accuracy == pytest.approx(want['test_accuracy'])
    assert abs(test_loss(None)[0] - want['test_loss']) > 1e-3  # the record matters
