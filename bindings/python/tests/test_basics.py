"""Models, contexts, plugins and errors through the binding."""
import json
import os

import numpy as np
import pytest

import dp

MLP = {'seed': 0, 'input': {'shape': [5]},
       'layers': [{'type': 'linear', 'out_features': 4}, {'type': 'relu'}, {'type': 'linear', 'out_features': 3}],
       'loss': {'type': 'cross_entropy'}}


def test_version_and_library():
    assert dp.version().count('.') == 2
    assert os.path.exists(dp.library_path)
    assert dp.HAVE_ZERO_COPY


def test_export_onnx(tmp_path):
    """Model.export_onnx writes the file (ONNX Runtime's comparison is tests/check_onnx.py);
    a path that cannot be written raises dp.IOError and writes nothing."""
    m = dp.Model(MLP)
    p = tmp_path / 'mlp.onnx'
    try:
        m.export_onnx(p)
    except dp.IOError as e:
        if 'built without ONNX support' in str(e):
            pytest.skip(str(e))
        raise
    assert p.stat().st_size > 4 * m.num_parameters
    with pytest.raises(dp.IOError, match='missing/mlp.onnx'):
        m.export_onnx(tmp_path / 'missing' / 'mlp.onnx')
    assert sorted(os.listdir(tmp_path)) == ['mlp.onnx']


def test_model_from_dict_text_and_file(tmp_path):
    a = dp.Model(MLP)
    b = dp.Model(json.dumps(MLP))
    f = tmp_path / 'mlp.json'
    f.write_text(json.dumps(MLP))
    c = dp.Model(f)
    d = dp.Model.from_file(str(f))
    e = dp.Model.from_json(json.dumps(MLP))
    for m in (b, c, d, e):
        assert np.array_equal(m.parameters(), a.parameters())  # same seed, same parameters
    assert a.num_parameters == 5 * 4 + 4 + 4 * 3 + 3
    assert a.parameter_info() == [('0.weight', (4, 5)), ('0.bias', (4,)), ('2.weight', (3, 4)), ('2.bias', (3,))]
    assert a.input_shape == (5,) and a.output_shape == (3,)
    named = dict(a.named_parameters())  # PyTorch's (name, value) pairs
    assert list(named) == ['0.weight', '0.bias', '2.weight', '2.bias'] and named['2.weight'].shape == (3, 4)
    assert [n for n, _ in a.named_parameters()] == list(named)


def test_set_parameters_round_trip():
    m = dp.Model(MLP)
    p = np.arange(m.num_parameters, dtype=np.float32)
    m.set_parameters(p)
    assert np.array_equal(m.parameters(), p)
    with pytest.raises(dp.InvalidArgumentError) as e:
        m.set_parameters(p[:-1])
    assert e.value.status == 1 and 'the model has' in e.value.message


def test_model_error_has_json_path():
    bad = dict(MLP, layers=[{'type': 'linear', 'out_features': -4}])
    with pytest.raises(dp.ModelError) as e:
        dp.Model(bad)
    err = e.value
    assert isinstance(err, dp.Error) and isinstance(err, ValueError)
    assert err.status == 3 and err.status_name == 'DP_ERR_MODEL'
    assert '/layers/0/out_features' in str(err) and str(err) == err.message


def test_model_file_error_names_file(tmp_path):
    f = tmp_path / 'bad.json'
    f.write_text('{"seed": 0, "input": {"shape": [5]}, "layers": [{"type": "conv3d"}]}')
    with pytest.raises(dp.ModelError) as e:
        dp.Model(f)
    assert str(f) in str(e.value) and '/layers/0/type' in str(e.value)
    with pytest.raises(dp.IOError) as e:
        dp.Model(tmp_path / 'missing.json')
    assert e.value.status == 5 and 'missing.json' in str(e.value)


def test_json_error():
    with pytest.raises(dp.JSONError) as e:
        dp.Model('{"seed": 0, ')
    assert e.value.status == 2


def test_device_and_optimizer_errors():
    m = dp.Model(MLP)
    with pytest.raises(dp.Error) as e:
        dp.DataParallel(m, 'gpu:0')
    assert e.value.status in (1, 6)
    g = dp.DataParallel(m, 'cpu:0,cpu:1')
    with pytest.raises(dp.ModelError) as e:
        dp.Optimizer(g, {'type': 'sgd', 'lr': 0.1, 'momentun': 0.9})
    assert 'momentun' in str(e.value)
    with pytest.raises(dp.InvalidArgumentError):
        dp.SGD(g, lr=0.1).lr = -1


def test_shape_error_on_forward():
    g = dp.DataParallel(dp.Model(MLP), 'cpu:0,cpu:1')
    with pytest.raises(dp.ShapeError) as e:
        g(np.zeros((4, 6), np.float32))
    assert e.value.status == 4


def test_plugins(shape_probe, swish):
    ctx = dp.Context()
    ctx.load_plugin(swish)
    (path, types), = ctx.plugins
    assert path.endswith('swish.so') and types == ['swish@1']
    m = dp.Model({'seed': 0, 'input': {'shape': [3]}, 'layers': [{'type': 'swish'}]}, ctx=ctx)
    out = dp.DataParallel(m, 'cpu:0')(np.array([[0.0, 1.0, -1.0]], np.float32)).numpy()
    assert np.allclose(out, [[0.0, 1 / (1 + np.exp(-1.0)), -1 / (1 + np.exp(1.0))]], rtol=1e-6)
    with pytest.raises(dp.PluginError) as e:
        ctx.load_plugin('/nonexistent/plugin.so')
    assert e.value.status == 9 and 'nonexistent' in str(e.value)
    with pytest.raises(dp.ModelError):  # swish is not known to another context
        dp.Model({'seed': 0, 'input': {'shape': [3]}, 'layers': [{'type': 'swish'}]}, ctx=dp.Context())


def test_group_basics():
    m = dp.Model(MLP)
    g = dp.DataParallel(m, ['cpu:0', 'cpu:1', 'cpu:2'])
    assert g.num_devices == 3
    out = g(np.zeros((10, 5), np.float32))
    assert out.shape == (10, 3) and g.last_split() == [4, 4, 2]
    g.set_split('balanced')
    g(np.zeros((10, 5), np.float32))
    assert g.last_split() == [4, 3, 3]
    assert dp.DataParallel(m, 2).num_devices == 2


def test_precision_on_cpus():
    g = dp.DataParallel(dp.Model(MLP), ['cpu:0', 'cpu:1'])
    assert g.set_precision('fp32') is g
    for p in ('bf16', 'fp16', 'bfloat16'):
        with pytest.raises(dp.DeviceError, match='CUDA devices'):
            g.set_precision(p)
    with pytest.raises(dp.InvalidArgumentError, match="'fp32', 'bf16' or 'fp16'"):
        g.set_precision('int8')
    assert g(np.zeros((4, 5), np.float32)).shape == (4, 3)  # still usable


def test_devices_and_pinned_memory():
    assert dp.device_count('cpu') >= 1
    gpus = dp.device_count('cuda')
    why = dp.device_count_why('cuda')
    assert (gpus == 0) == (why != '')
    t = dp.tensor([1.0, 2.0, 3.0])
    if gpus == 0:
        with pytest.raises(dp.DeviceError):
            t.pin_memory()
        with pytest.raises(dp.DeviceError):
            dp.Group(dp.Model(MLP), 'cuda:0')
    else:
        assert 'compute capability' in dp.device_name('cuda', 0)
        t.pin_memory()
    assert t.numpy().tolist() == [1.0, 2.0, 3.0]


def test_context_memory_limit_and_model_plugins(tmp_path):
    big = dict(MLP, layers=[{'type': 'linear', 'out_features': 99999999999999}])
    with pytest.raises(dp.OutOfMemoryError) as e:  # before allocation, naming the layer
        dp.Model(big)
    assert isinstance(e.value, MemoryError) and "/layers/0 (linear '0')" in str(e.value)
    small = dp.Context(memory_limit=100)  # the MLP takes 312 bytes
    with pytest.raises(MemoryError, match='DP_CONTEXT_MEMORY_LIMIT'):
        dp.Model(MLP, ctx=small)
    small.set_memory_limit(0)
    dp.Model(MLP, ctx=small)
    # A model naming a library by path loads nothing unless the context allows it.
    f = tmp_path / 'plug.json'
    f.write_text(json.dumps(dict(MLP, plugins=['./nothing.so'])))
    (tmp_path / 'nothing.so').write_bytes(b'not a library')
    with pytest.raises(dp.PluginError, match='allow-model-plugins'):
        dp.Model(f)
    with pytest.raises(dp.PluginError, match='cannot load plugin'):
        dp.Model(f, ctx=dp.Context(allow_model_plugins=True))


def test_lr_schedule():
    net = dp.DataParallel(dp.Model(MLP), devices='cpu:0')
    opt = dp.SGD(net, lr=0.1)
    opt.set_lr_schedule({'type': 'step', 'step_size': 2, 'gamma': 0.5})
    x = np.ones((4, 5), np.float32)
    y = np.array([0, 1, 2, 0], np.int64)
    lrs = []
    for _ in range(5):
        net.train_step(opt, x, y)
        lrs.append(opt.lr)
    assert lrs == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])  # StepLR, per step
    with pytest.raises(dp.ModelError, match="unknown lr schedule 'nope'"):
        opt.set_lr_schedule({'type': 'nope'})
    opt.set_lr_schedule(None)
    assert opt.lr == 0.1


BN = {'seed': 2, 'input': {'shape': [5]},
      'layers': [{'type': 'linear', 'out_features': 4}, {'type': 'batch_norm1d'}, {'type': 'linear', 'out_features': 3}],
      'loss': {'type': 'cross_entropy'}}


def test_deepcopy_model_is_independent_and_survives_the_original(tmp_path, monkeypatch):
    """copy.deepcopy(model), as for an EMA or best-so-far copy: same weights and buffers, its own
    libdp model (before, Python copied the handle: two objects freeing one model)."""
    import copy
    import gc
    path = tmp_path / 'bn.json'
    path.write_text(json.dumps(BN))
    for make in (lambda: dp.Model(BN), lambda: dp.Model.from_json(json.dumps(BN)), lambda: dp.Model(str(path)),
                 lambda: dp.Model.from_file(path)):
        m = make()
        net = dp.DataParallel(m, devices='cpu:0,cpu:1')
        opt = dp.SGD(net, lr=0.1)
        x = np.random.default_rng(0).standard_normal((8, 5)).astype(np.float32)
        y = np.arange(8) % 3
        net.train_step(opt, x, y)  # moves weights and the running statistics
        monkeypatch.chdir(tmp_path.parent)  # a relative file path must still be found
        c = copy.deepcopy(m)
        assert c is not m and c._h.value != m._h.value
        np.testing.assert_array_equal(c.parameters(), m.parameters())
        np.testing.assert_array_equal(c.buffers(), m.buffers())
        assert not np.array_equal(m.buffers(), dp.Model(BN).buffers())
        before = c.parameters()
        net.train_step(opt, x, y)
        np.testing.assert_array_equal(c.parameters(), before)  # the copy did not move
        del net, opt, m
        gc.collect()
        assert c.num_parameters == before.size
        np.testing.assert_array_equal(c.parameters(), before)
        monkeypatch.undo()


def test_copy_and_pickle_of_handle_objects_are_refused_clearly(tmp_path):
    """Python's default copy.copy / pickle of an object owning a libdp handle would give two objects
    one handle (a crash or a read of freed memory later): each is a dp.UnsupportedError naming what
    to do instead. dp.Tensor's copy.copy views the same elements and its deepcopy clones."""
    import copy
    import gc
    import pickle
    import re
    m = dp.Model(MLP)
    net = dp.DataParallel(m, devices='cpu:0,cpu:1')
    opt = dp.SGD(net, lr=0.1)
    ds = dp.Dataset.from_arrays(np.zeros((4, 5), np.float32), np.zeros(4, np.int64))
    loader = dp.DataLoader(ds, batch_size=2)
    hints = [(m, 'copy.deepcopy(model)'), (net, 'copy.deepcopy(dp_model.module)'), (opt, 'load_state_dict'),
             (ds, 'share it'), (loader, 'same arguments'), (dp.default_context(), 'share the one context')]
    for obj, hint in hints:
        ops = [('copy.copy', copy.copy), ('pickling', pickle.dumps)]
        if obj is not m:
            ops.append(('copy.deepcopy', copy.deepcopy))
        for how, op in ops:
            with pytest.raises(dp.UnsupportedError, match=f'{how} of a dp.{type(obj).__name__}.*{re.escape(hint)}'):
                op(obj)
    with pytest.raises(NotImplementedError):
        copy.copy(m)
    # Everything still works: nothing was shared or freed.
    assert net.train_step(opt, np.ones((4, 5), np.float32), np.zeros(4, np.int64)) > 0
    assert sum(1 for _ in loader) == 2

    t = dp.tensor([0.0, 1.0, 2.0, 3.0])
    view, clone = copy.copy(t), copy.deepcopy(t)
    t.copy_([5.0, 6.0, 7.0, 8.0])
    assert view.tolist() == [5.0, 6.0, 7.0, 8.0] and clone.tolist() == [0.0, 1.0, 2.0, 3.0]
    del t
    gc.collect()
    assert view.tolist() == [5.0, 6.0, 7.0, 8.0]  # the view keeps the tensor alive
    with pytest.raises(dp.UnsupportedError, match='pickling of a dp.Tensor'):
        pickle.dumps(view)


def test_all_names_every_public_name():
    """`from dp import *` gives every public name dp has (device_count was missing), and nothing
    it lacks; dp.IOError stays out so that the builtin IOError is not shadowed."""
    import types
    public = {n for n in dir(dp) if not n.startswith('_') and not isinstance(getattr(dp, n), types.ModuleType)}
    assert set(dp.__all__) - set(dir(dp)) == set()
    assert public - set(dp.__all__) == {'IOError'}
    assert len(dp.__all__) == len(set(dp.__all__))
    namespace = {}
    exec('from dp import *', namespace)
    assert 'IOError' not in namespace and namespace['device_count'] is dp.device_count
