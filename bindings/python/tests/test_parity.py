"""What a PyTorch user expects of the Python API (issue 15): state_dict /
load_state_dict on models and optimizers, DataParallel's .module and
device_ids=, the loop variables after a DataLoader loop, weights saved for
torch in one call, and Tensor's repr."""
import gc
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import dp

ROOT = os.environ.get('DP_SOURCE_ROOT', os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..')))
MLP_BN = os.path.join(ROOT, 'examples', 'fashion_mnist_mlp.json')  # flatten, linear, batch_norm, relu, ...
SMALL = {'input': {'shape': [4]}, 'seed': 1, 'loss': {'type': 'cross_entropy'},
         'layers': [{'type': 'linear', 'out_features': 6}, {'type': 'batch_norm'}, {'type': 'relu'},
                    {'type': 'linear', 'out_features': 3}]}
TORCH = next((p for p in (os.environ.get('DP_TORCH_PYTHON'), '/tmp/torchenv/bin/python',
                          '/root/.cache/dp-torch/bin/python') if p and os.path.exists(p)), None)


def batch(n=8, seed=0):
    r = np.random.default_rng(seed)
    return r.standard_normal((n, 4)).astype(np.float32), (np.arange(n) % 3).astype(np.int64)


# -- 1. state_dict / load_state_dict

def test_model_state_dict_names_as_pytorch():
    m = dp.Model(MLP_BN)
    sd = m.state_dict()
    assert list(sd) == ['1.weight', '1.bias', '2.weight', '2.bias', '2.running_mean', '2.running_var',
                        '2.num_batches_tracked', '4.weight', '4.bias', '5.weight', '5.bias', '5.running_mean',
                        '5.running_var', '5.num_batches_tracked', '7.weight', '7.bias']
    assert sd['1.weight'].shape == (256, 784) and sd['1.weight'].dtype == np.float32
    assert sd['2.num_batches_tracked'].dtype == np.int64 and sd['2.num_batches_tracked'].shape == ()
    for k, v in m.named_parameters():
        assert np.array_equal(sd[k], v)
    assert np.array_equal(np.concatenate([sd['2.running_mean'], sd['2.running_var'], sd['5.running_mean'],
                                          sd['5.running_var']]), m.buffers())


def test_model_load_state_dict_round_trip_and_strict():
    a, b = dp.Model(SMALL), dp.Model(dict(SMALL, seed=2))
    net = dp.DataParallel(a, 1)
    opt = dp.SGD(net, lr=0.1)
    x, y = batch()
    net.train_step(opt, x, y)  # buffers move away from 0 / 1
    sd = a.state_dict()
    assert b.load_state_dict(sd) == dp.IncompatibleKeys([], [])
    got = b.state_dict()
    assert all(np.array_equal(got[k], sd[k]) for k in sd)
    # The group sees the loaded weights.
    nb = dp.DataParallel(b, 1).eval()
    net.eval()
    assert np.array_equal(nb(x).numpy(), net(x).numpy())

    before = b.state_dict()
    bad = dict(sd)
    del bad['0.bias']
    bad['9.weight'] = np.zeros(3, np.float32)
    with pytest.raises(dp.StateDictError) as e:
        b.load_state_dict(bad)
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, dp.Error)
    assert e.value.missing_keys == ['0.bias'] and e.value.unexpected_keys == ['9.weight']
    assert '"0.bias"' in str(e.value) and '"9.weight"' in str(e.value)
    assert all(np.array_equal(b.state_dict()[k], before[k]) for k in before)  # unchanged

    bad['0.weight'] = sd['0.weight'] * 0 + 7
    r = b.load_state_dict(bad, strict=False)
    assert r.missing_keys == ['0.bias'] and r.unexpected_keys == ['9.weight']
    missing_keys, unexpected_keys = r  # a NamedTuple, as PyTorch's _IncompatibleKeys
    assert np.all(b.state_dict()['0.weight'] == 7) and np.array_equal(b.state_dict()['0.bias'], before['0.bias'])

    # num_batches_tracked is optional (dp keeps no count).
    no_nbt = {k: v for k, v in sd.items() if not k.endswith('num_batches_tracked')}
    assert b.load_state_dict(no_nbt) == ([], [])


def test_shape_mismatch_raises_even_when_not_strict():
    m = dp.Model(SMALL)
    sd = m.state_dict()
    sd['0.weight'] = np.zeros((6, 5), np.float32)
    for strict in (True, False):
        with pytest.raises(dp.StateDictError, match='size mismatch for 0.weight'):
            m.load_state_dict(sd, strict=strict)


def test_data_parallel_state_dict_has_module_prefix():
    m = dp.Model(SMALL)
    net = dp.DataParallel(m, 1)
    sd = net.state_dict()
    assert all(k.startswith('module.') for k in sd) and 'module.0.weight' in sd
    sd['module.0.weight'] = sd['module.0.weight'] + 1
    net.load_state_dict(sd)
    assert np.array_equal(m.state_dict()['0.weight'], sd['module.0.weight'])
    with pytest.raises(dp.StateDictError):
        net.load_state_dict(m.state_dict())  # plain names: every key missing and unexpected, as PyTorch


@pytest.mark.parametrize('kind', ['sgd', 'adam'])
def test_optimizer_state_dict_resumes_exactly(kind):
    def make(seed):
        m = dp.Model(dict(SMALL, seed=seed))
        net = dp.DataParallel(m, 1)
        opt = dp.SGD(net, lr=0.1, momentum=0.9) if kind == 'sgd' else dp.Adam(net, lr=0.01)
        return m, net, opt

    m, net, opt = make(1)
    assert opt.state_dict()['state'] == {}  # before the first step, as PyTorch's
    x, y = batch()
    for _ in range(3):
        net.train_step(opt, x, y)
    sd = opt.state_dict()
    assert sd['param_groups'][0]['params'] == [0, 1, 2, 3, 4, 5] and sd['param_groups'][0]['lr'] == opt.lr
    names = {'sgd': {'momentum_buffer', 'step'}, 'adam': {'exp_avg', 'exp_avg_sq', 'step'}}[kind]
    assert set(sd['state']) == set(range(6)) and all(set(s) == names for s in sd['state'].values())
    assert sd['state'][0]['step'] == 3 and sd['state'][0][sorted(names)[0]].shape == (6, 4)

    m2, net2, opt2 = make(7)
    opt2.lr = 0.5
    m2.load_state_dict(m.state_dict())
    opt2.load_state_dict(sd)
    assert opt2.lr == opt.lr
    for _ in range(2):
        assert net.train_step(opt, x, y) == net2.train_step(opt2, x, y)
    assert np.array_equal(m.parameters(), m2.parameters())

    bad = {'state': {0: dict(sd['state'][0], bogus=np.zeros(1))}, 'param_groups': sd['param_groups']}
    with pytest.raises(dp.StateDictError, match='bogus'):
        opt2.load_state_dict(bad)
    bad = {'state': {0: {k: np.zeros(3, np.float32) if k != 'step' else v for k, v in sd['state'][0].items()}},
           'param_groups': sd['param_groups']}
    with pytest.raises(dp.StateDictError, match='size mismatch'):
        opt2.load_state_dict(bad)


def _trained(kind, steps=3, seed=1, schedule=None):
    m = dp.Model(dict(SMALL, seed=seed))
    net = dp.DataParallel(m, 1)
    opt = dp.SGD(net, lr=0.1, momentum=0.9) if kind == 'sgd' else dp.Adam(net, lr=0.01)
    if schedule:
        opt.set_lr_schedule(schedule)
    x, y = batch()
    for _ in range(steps):
        net.train_step(opt, x, y)
    return m, net, opt


@pytest.mark.parametrize('kind,wd', [('adam', 0.0), ('adam', 0.1), ('adamw', 0.1)])
def test_adam_step_is_pytorchs_operation_by_operation(kind, wd):
    """torch.optim.Adam's single-tensor step in float32, operation by operation:
    exp_avg.lerp_(grad, 1 - beta1), exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
    value=1 - beta2), param.addcdiv_(exp_avg, sqrt(exp_avg_sq) / sqrt(bias
    correction 2) + eps, value=-lr / bias correction 1), with 1 - beta worked out
    in double as PyTorch's Python floats are. dp used 1 - float32(0.999): every
    step 6.4e-6 relatively off, a Fashion-MNIST MLP's loss 2e-4 from PyTorch's
    after 18 steps. Bit for bit against these formulas; PyTorch 2.15 itself is
    within 2 ulp of them over 20 steps (its vector kernels fuse multiply-adds)."""
    m = dp.Model(dict(SMALL, seed=3))
    net = dp.DataParallel(m, 1)
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    opt = (dp.Adam if kind == 'adam' else dp.AdamW)(net, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    f = np.float32
    p = m.parameters().copy()
    exp_avg, exp_avg_sq = np.zeros_like(p), np.zeros_like(p)
    for t in range(1, 5):
        net.zero_grad()
        net.forward_backward(*batch(seed=t))
        g = m.gradients().copy()
        opt.step()
        if kind == 'adamw':
            p = p * f(1 - lr * wd)
        elif wd:
            g = g + f(wd) * p
        exp_avg = exp_avg + f(1 - b1) * (g - exp_avg)
        exp_avg_sq = exp_avg_sq * f(b2) + f(1 - b2) * g * g
        step_size, bc2_sqrt = f(lr / (1 - b1 ** t)), f(math.sqrt(1 - b2 ** t))
        p = p - step_size * exp_avg / (np.sqrt(exp_avg_sq) / bc2_sqrt + f(eps))
        state = opt.state_dict()['state']
        assert np.array_equal(np.concatenate([state[i]['exp_avg_sq'].ravel() for i in sorted(state)]), exp_avg_sq)
        assert np.array_equal(np.concatenate([state[i]['exp_avg'].ravel() for i in sorted(state)]), exp_avg)
        assert np.array_equal(m.parameters(), p), f'step {t}: {np.abs(m.parameters() - p).max()}'


def test_optimizers_take_pytorchs_implementation_arguments_at_dps_values():
    """PyTorch code passes maximize=False, foreach=None, fused=None (and a
    param_groups entry holds them): taken; other values refused by name.
    Adam(decoupled_weight_decay=True) is AdamW, as in torch 2.x;
    zero_grad(set_to_none=...) as PyTorch's."""
    _, net, _ = _trained('sgd', 0)
    g = dict(dp.SGD(net, lr=0.1, momentum=0.9).param_groups[0])
    g.pop('params')
    assert dp.SGD(net, **g).param_groups[0]['momentum'] == 0.9
    a = dict(dp.Adam(net, lr=0.01).param_groups[0])
    a.pop('params')
    assert dp.Adam(net, **a).param_groups[0]['decoupled_weight_decay'] is False
    with pytest.raises(dp.UnsupportedError, match='maximize=True'):
        dp.SGD(net, lr=0.1, maximize=True)
    with pytest.raises(dp.UnsupportedError, match='foreach=True'):
        dp.Adam(net, foreach=True)
    w = dp.Adam(net, lr=0.01, decoupled_weight_decay=True, weight_decay=0.1).param_groups[0]
    assert w['decoupled_weight_decay'] is True and w['weight_decay'] == 0.1
    assert dp.Adam(net, decoupled_weight_decay=True).param_groups[0]['weight_decay'] == 0  # Adam's default
    with pytest.raises(dp.UnsupportedError, match='decoupled_weight_decay'):
        dp.AdamW(net, decoupled_weight_decay=False)
    opt = dp.SGD(net, lr=0.1)
    for to_none in (True, False):
        opt.zero_grad(set_to_none=to_none)
        net.zero_grad(set_to_none=to_none)


def test_optimizer_param_groups_have_pytorchs_keys_and_defaults():
    # torch 2.x's param_groups keys (torch.optim.Adam/SGD(...).state_dict()),
    # so that torch.optim's step() finds each one after load_state_dict.
    _, net, _ = _trained('sgd', 0)
    g = dp.SGD(net, lr=0.1).param_groups[0]
    assert set(g) == {'lr', 'momentum', 'dampening', 'weight_decay', 'nesterov', 'maximize', 'foreach',
                      'differentiable', 'fused', 'params'}
    assert (g['momentum'], g['dampening'], g['weight_decay'], g['nesterov']) == (0, 0, 0, False)
    for cls, wd, decoupled in ((dp.Adam, 0, False), (dp.AdamW, 0.01, True)):
        g = cls(net, lr=0.01).param_groups[0]
        assert set(g) == {'lr', 'betas', 'eps', 'weight_decay', 'amsgrad', 'maximize', 'foreach', 'capturable',
                          'differentiable', 'fused', 'decoupled_weight_decay', 'params'}
        assert (g['betas'], g['eps'], g['weight_decay'], g['decoupled_weight_decay']) == ((0.9, 0.999), 1e-8, wd,
                                                                                         decoupled)


def test_optimizer_param_groups_lr_writes_through():
    """`for g in opt.param_groups: g["lr"] = ...` (manual warmup, plateau
    logic) changes the next steps' lr, as in PyTorch (it was a copy, and the
    write was lost); other hyperparameters refuse a change instead of
    ignoring it; under a schedule "initial_lr" is its base."""
    m, net, opt = _trained('sgd', 0)
    before = m.parameters().copy()
    for g in opt.param_groups:
        g['lr'] = 0.5
        assert g['lr'] == 0.5
    assert opt.lr == 0.5 and opt.param_groups[0]['lr'] == 0.5
    x, y = batch(seed=3)
    m2, net2, opt2 = _trained('sgd', 0, seed=9)
    m2.set_parameters(before)
    opt2.lr = 0.5
    net.train_step(opt, x, y)
    net2.train_step(opt2, x, y)
    assert np.array_equal(m.parameters(), m2.parameters())
    opt.param_groups[0].update(lr=0.25, momentum=0.9)  # the same momentum: not a change
    assert opt.lr == 0.25
    with pytest.raises(dp.InvalidArgumentError, match='momentum'):
        opt.param_groups[0]['momentum'] = 0.5
    with pytest.raises(dp.InvalidArgumentError):
        opt.param_groups[0]['lr'] = -1
    assert type(opt.state_dict()['param_groups'][0]) is dict
    pg = opt.param_groups[0]
    pg |= {'lr': 0.125}  # dict's in-place union skips __setitem__: written through all the same
    assert opt.lr == 0.125
    opt.lr = 0.0625
    assert pg['lr'] == 0.0625 and pg.get('lr') == 0.0625  # read live, not as made
    with pytest.raises(dp.InvalidArgumentError):
        pg.pop('lr')
    with pytest.raises(dp.InvalidArgumentError):
        pg.update(lr=0.5, momentum=0.5)  # all checked first: nothing written
    assert opt.lr == 0.0625
    assert dp.SGD(net).lr == dp.Adam(net).lr == 1e-3  # PyTorch's default lr
    _, _, sched = _trained('sgd', 2, schedule={'type': 'step', 'step_size': 1, 'gamma': 0.5})
    with pytest.raises(dp.InvalidArgumentError, match='initial_lr'):
        sched.param_groups[0]['lr'] = 0.3
    sched.param_groups[0]['initial_lr'] = 0.4
    assert sched.param_groups[0]['initial_lr'] == 0.4


def test_optimizer_state_dict_without_step_as_torch_sgd_writes_it():
    """torch.optim.SGD keeps momentum_buffer and no "step": its buffers are
    used from the next step on (they were dropped before: 0.03 apart)."""
    m, net, opt = _trained('sgd')
    sd = opt.state_dict()
    for st in sd['state'].values():
        del st['step']
    m2, net2, opt2 = _trained('sgd', 0, seed=9)
    m2.load_state_dict(m.state_dict())
    opt2.load_state_dict(sd)
    x, y = batch(seed=1)
    for _ in range(2):
        assert net.train_step(opt, x, y) == net2.train_step(opt2, x, y)
    assert np.array_equal(m.parameters(), m2.parameters())


def test_optimizer_state_dict_resumes_a_schedule_once():
    """param_groups holds the schedule's base as "initial_lr" (as PyTorch's
    schedulers add it): a resumed run follows the uninterrupted one's lrs (the
    scheduled lr was taken as the base before, and scheduled twice)."""
    sched = {'type': 'step', 'step_size': 2, 'gamma': 0.5}
    m, net, opt = _trained('sgd', 4, schedule=sched)
    sd = opt.state_dict()
    assert sd['param_groups'][0]['initial_lr'] == 0.1 and sd['param_groups'][0]['lr'] == opt.lr == 0.05
    m2, net2, opt2 = _trained('sgd', 0, seed=9, schedule=sched)
    m2.load_state_dict(m.state_dict())
    opt2.load_state_dict(sd)
    x, y = batch(seed=2)
    for _ in range(4):
        net.train_step(opt, x, y)
        net2.train_step(opt2, x, y)
        assert opt.lr == opt2.lr
    assert np.array_equal(m.parameters(), m2.parameters())


def test_optimizer_load_state_dict_refuses_other_hyperparameters():
    """dp fixes hyperparameters at creation; PyTorch's load_state_dict adopts
    the dict's: a dict with others is refused, naming them, nothing changed."""
    _, net, opt = _trained('sgd')
    sd = opt.state_dict()
    other = dp.SGD(net, lr=0.1, momentum=0.5, weight_decay=0.1)
    with pytest.raises(dp.StateDictError, match=r'momentum=0.9 \(this optimizer: 0.5\), weight_decay=0 '):
        other.load_state_dict(sd)
    assert other.state_dict()['state'] == {}
    _, net_a, adam = _trained('adam')
    with pytest.raises(dp.StateDictError, match='decoupled_weight_decay=False'):
        dp.AdamW(net_a, lr=0.01, weight_decay=0).load_state_dict(adam.state_dict())
    with pytest.raises(dp.StateDictError, match='amsgrad=True'):
        dp.Adam(net_a, lr=0.01).load_state_dict(dict(adam.state_dict(), param_groups=[
            dict(adam.state_dict()['param_groups'][0], amsgrad=True)]))


# -- 2. DataParallel(...).module, device_ids=

def test_module_and_device_ids():
    m = dp.Model(SMALL)
    net = dp.DataParallel(m, device_ids=['cpu:0', 'cpu:1'])
    assert net.module is m and net.num_devices == 2
    assert dp.DataParallel(m, device_ids='cpu:0').num_devices == 1
    from dp._model import _device_ids
    assert _device_ids([0, 1]) == 'cuda:0,cuda:1' and _device_ids(0) == 'cuda:0'
    assert _device_ids([1, 'cpu:0']) == 'cuda:1,cpu:0'
    with pytest.raises(dp.ArgumentTypeError, match='not both'):
        dp.DataParallel(m, devices='cpu:0', device_ids=['cpu:0'])
    with pytest.raises(TypeError):
        dp.DataParallel(m, device_ids=[1.5])
    if not dp.device_count('cuda'):
        with pytest.raises(dp.DeviceError):
            dp.DataParallel(m, device_ids=[0])  # cuda:0, as PyTorch's
    assert dp.DataParallel(m, 1).num_devices == 1  # devices= positional, as before


# -- 3. the loop variables after `for x, y in loader`

def test_loop_variables_hold_the_last_batch():
    xs = np.arange(70, dtype=np.float32).reshape(35, 2)
    ys = np.arange(35)
    loader = dp.DataLoader(dp.Dataset.from_arrays(xs, ys), batch_size=10, shuffle=True, seed=3)
    for epoch in range(2):
        seen, objs = [], set()
        for x, y in loader:
            seen.append(y.numpy(copy=True))
            objs.add(id(x))
        assert x.shape == (5, 2) and y.shape == (5,)
        assert np.array_equal(y.numpy(), seen[-1]) and np.array_equal(x.numpy(), xs[seen[-1]])
        del x, y
        gc.collect()
        assert len(objs) <= 2  # two pairs take turns: no allocation per batch
    # next_batch: None at the end leaves the last batch alone too.
    b = loader.next_batch()
    while True:
        n = loader.next_batch()
        if n is None:
            break
        b = n
    assert b[0].shape == (5, 2)


def test_kept_batches_are_not_refilled():
    xs = np.arange(70, dtype=np.float32).reshape(35, 2)
    loader = dp.DataLoader(dp.Dataset.from_arrays(xs, np.arange(35)), batch_size=10)
    kept = [(x, y) for x, y in loader]
    assert [b[1].numpy().tolist() for b in kept] == [list(range(i, min(i + 10, 35))) for i in range(0, 35, 10)]


def test_buffer_info_and_set_buffers():
    m = dp.Model(SMALL)  # linear, batch_norm, relu, linear
    assert m.buffer_info() == [('1.running_mean', (6,)), ('1.running_var', (6,))]
    stats = np.arange(12, dtype=np.float32)
    m.set_buffers(stats)
    assert np.array_equal(m.buffers(), stats)
    assert np.array_equal(m.state_dict()['1.running_var'], stats[6:])
    with pytest.raises(dp.InvalidArgumentError, match='got 11 floats, the model has 12'):
        m.set_buffers(stats[:11])
    m2 = dp.Model(dict(SMALL, seed=9))
    m2.load_state_dict(m.state_dict())
    assert np.array_equal(m2.buffers(), stats) and np.array_equal(m2.parameters(), m.parameters())


def test_a_second_iterator_takes_over_and_the_first_one_says_so():
    """A DataLoader has one position: zip(loader, loader) raises instead of
    splitting the batches between the two (it yielded (0, 5), (10, 15)), and
    a running iterator raises once iter() is called again (it went on in the
    new epoch)."""
    loader = dp.DataLoader(dp.Dataset.from_arrays(np.zeros((20, 1), np.float32), np.arange(20)), batch_size=5)
    with pytest.raises(dp.InvalidArgumentError, match='replaced by a newer iter'):
        list(zip(loader, loader))
    first = iter(loader)
    assert next(first)[1].numpy().tolist() == [0, 1, 2, 3, 4]
    second = iter(loader)  # a new epoch, as a new iterator starts one
    with pytest.raises(dp.InvalidArgumentError, match='replaced by a newer iter'):
        next(first)
    assert [y.numpy()[0] for _, y in second] == [0, 5, 10, 15]
    assert [y.numpy()[0] for _, y in loader] == [0, 5, 10, 15]  # and the loader goes on as before


def test_loader_takes_pytorchs_pin_memory_and_prefetch_factor():
    ds = dp.Dataset.from_arrays(np.zeros((10, 3), np.float32), np.zeros(10, np.int64))
    assert [x.shape[0] for x, _ in dp.DataLoader(ds, batch_size=4, num_workers=2, prefetch_factor=3)] == [4, 4, 2]
    with pytest.raises(dp.ArgumentTypeError, match='not both'):
        dp.DataLoader(ds, batch_size=4, prefetch=3, prefetch_factor=3)
    # persistent_workers: what dp's threads do anyway; without workers refused, as PyTorch's ValueError
    loader = dp.DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True)
    assert [[x.shape[0] for x, _ in loader] for _ in range(2)] == [[4, 4, 2]] * 2
    with pytest.raises(dp.InvalidArgumentError, match='needs num_workers > 0') as e:
        dp.DataLoader(ds, batch_size=4, persistent_workers=True)
    assert isinstance(e.value, ValueError)
    if dp.device_count('cuda') == 0:  # as PyTorch without an accelerator: a warning, unpinned batches
        with pytest.warns(UserWarning, match='pin_memory=True, but no usable GPU'):
            loader = dp.DataLoader(ds, batch_size=4, pin_memory=True)
        assert len(loader) == 3


def test_numpy_values_in_configs_and_nan_refused():
    net = dp.DataParallel(dp.Model(SMALL), 1)
    assert dp.SGD(net, lr=np.float32(0.5)).lr == 0.5
    assert dp.Adam(net, lr=0.01, betas=np.array([0.8, 0.9])).param_groups[0]['betas'] == (0.8, 0.9)
    ds = dp.Dataset.from_arrays(np.zeros((8, 4), np.float32), np.zeros(8, np.int64))
    assert len(dp.DataLoader(ds, batch_size=np.int64(4))) == 2
    with pytest.raises(dp.InvalidArgumentError, match='optimizer config: cannot be written as JSON: Out of range'):
        dp.SGD(net, lr=float('nan'))


def test_zero_dim_arrays_stay_zero_dim():
    assert dp.tensor(3.5).shape == () and dp.tensor(np.float32(2)).item() == 2.0
    assert dp.tensor([[1, 2]]).shape == (1, 2)
    t = np.arange(6, dtype=np.float32).reshape(2, 3).T  # not contiguous: copied in order
    assert np.array_equal(dp.tensor(t).numpy(), t)


def test_state_dict_orders_modules_as_torch_with_buffer_only_layers():
    spec = {'input': {'shape': [4]}, 'layers': [{'type': 'linear', 'out_features': 4},
                                                {'type': 'batch_norm', 'affine': False},
                                                {'type': 'linear', 'out_features': 2}]}
    assert list(dp.Model(spec).state_dict()) == ['0.weight', '0.bias', '1.running_mean', '1.running_var',
                                                 '1.num_batches_tracked', '2.weight', '2.bias']


def test_device_arguments_as_pytorch_and_clear_refusals():
    m = dp.Model(SMALL)
    with pytest.raises(dp.InvalidArgumentError, match='devices = 0: a count of CPU devices must be at least 1'):
        dp.DataParallel(m, 0)
    with pytest.raises(dp.ArgumentTypeError, match='not bool True'):
        dp.DataParallel(m, True)
    with pytest.raises(dp.ArgumentTypeError, match='a DataParallel already; wrap its .module'):
        dp.DataParallel(dp.DataParallel(m, 1))
    if dp.device_count('cuda') == 0:  # ints in the list are PyTorch's device_ids: cuda:i
        with pytest.raises(dp.DeviceError, match='cuda'):
            dp.DataParallel(m, [0])
    assert dp.DataParallel(m, ['cpu:0', 'cpu:1']).num_devices == 2


def test_conversion_failures_are_dp_errors():
    """What an argument's own conversion raises (torch: a tensor that requires
    grad, a meta tensor) comes out as a dp.Error, as the README promises."""
    class Refuses:
        def __array__(self, *args, **kwargs):
            raise RuntimeError("Can't call numpy() on Tensor that requires grad")
    with pytest.raises(dp.InvalidArgumentError, match='RuntimeError: Can.t call numpy'):
        dp.tensor(Refuses())
    m = dp.Model(SMALL)
    sd = m.state_dict()
    with pytest.raises(dp.InvalidArgumentError, match="'0.bias'.*RuntimeError"):
        m.load_state_dict(dict(sd, **{'0.bias': Refuses()}))
    with pytest.raises(dp.ArgumentTypeError, match="'0.bias': None is not an array"):
        m.load_state_dict(dict(sd, **{'0.bias': None}))


# -- 4. weights for PyTorch in one call

def test_save_weights_has_exactly_torchs_keys(tmp_path):
    from dp._util import _st_read
    m = dp.Model(MLP_BN)
    net = dp.DataParallel(m, 1)
    for p, saver in ((tmp_path / 'a.safetensors', lambda p: m.save_weights(p)),
                     (tmp_path / 'b.safetensors', lambda p: dp.save_weights(net, p))):
        saver(p)
        tensors, meta = _st_read(p)
        assert list(tensors) == list(m.state_dict()) or set(tensors) == set(m.state_dict())
        assert not any(k.startswith('optimizer.') for k in tensors)
        assert tensors['2.num_batches_tracked'].dtype == np.int64
        assert tensors['2.num_batches_tracked'].shape == ()  # a 0-d tensor, as torch writes it (was [1])
        m2 = dp.Model(MLP_BN)
        dp.load_weights(m2, p)  # dp reads what it wrote for torch
        assert np.array_equal(m2.parameters(), m.parameters()) and np.array_equal(m2.buffers(), m.buffers())
    # A libdp before dp_model_save_weights: the binding adds the counts itself, to the same tensors.
    from dp import _lib
    _lib.missing.append('dp_model_save_weights')
    try:
        m.save_weights(tmp_path / 'old.safetensors')
    finally:
        _lib.missing.remove('dp_model_save_weights')
    old, _ = _st_read(tmp_path / 'old.safetensors')
    new, _ = _st_read(tmp_path / 'a.safetensors')
    assert old.keys() == new.keys() and all(np.array_equal(old[k], new[k]) and old[k].dtype == new[k].dtype
                                            for k in new)


TORCH_SCRIPT = r'''
import sys
sys.path.insert(0, sys.argv[1])
import torch, safetensors.torch
import dp
path = sys.argv[2]
m = dp.Model(sys.argv[3])
net = dp.DataParallel(m, 1)
opt = dp.SGD(net, lr=0.1, momentum=0.9)
x = torch.randn(16, 1, 28, 28)
y = torch.arange(16) % 10
net.train_step(opt, x.numpy(), y.numpy())
dp.save_weights(m, path)
t = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
                        torch.nn.Linear(256, 128), torch.nn.BatchNorm1d(128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
t.load_state_dict(safetensors.torch.load_file(path), strict=True)
t.eval(); net.eval()
ref = t(x).detach().numpy()
out = net(x.numpy()).numpy()
assert abs(ref - out).max() < 1e-4, abs(ref - out).max()
# And back: torch's state_dict loads into a dp model (strict).
m.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
print('torch ok')
'''


def _torch_python():
    try:
        import safetensors.torch  # noqa: F401
        import torch  # noqa: F401
        return sys.executable
    except ImportError:
        return TORCH


@pytest.mark.skipif(_torch_python() is None, reason='no PyTorch with safetensors (in this interpreter or at '
                    'DP_TORCH_PYTHON, /tmp/torchenv, /root/.cache/dp-torch)')
def test_save_weights_loads_into_torch_strict(tmp_path):
    r = subprocess.run([_torch_python(), '-c', TORCH_SCRIPT,
                        os.path.dirname(os.path.dirname(os.path.abspath(dp.__file__))),
                        str(tmp_path / 'w.safetensors'), MLP_BN], capture_output=True, text=True, timeout=300)
    if r.returncode != 0 and 'No module named' in r.stderr:
        pytest.skip(r.stderr.strip().splitlines()[-1])
    assert r.returncode == 0, r.stderr
    assert 'torch ok' in r.stdout


# -- 5. repr, and the zero-copy ways out stay zero-copy

def test_model_and_data_parallel_repr(tmp_path):
    """print(model) as print(torch_model) reads: layers with settings and parameter shapes."""
    spec = {'input': {'shape': [1, 4, 4]}, 'seed': 1, 'loss': {'type': 'cross_entropy', 'label_smoothing': 0.1},
            'layers': [{'type': 'conv2d', 'out_channels': 2, 'kernel_size': 3, 'name': 'stem'}, {'type': 'relu'},
                       {'type': 'flatten'}, {'type': 'linear', 'out_features': 3}]}
    lines = repr(dp.Model(spec)).splitlines()
    assert lines == ['dp.Model(input [1, 4, 4] -> output [3], 47 parameters:',
                     "  (stem): conv2d(out_channels=2, kernel_size=3)    # weight [2, 1, 3, 3], bias [2]",
                     '  (1): relu()', '  (2): flatten()',
                     '  (3): linear(out_features=3)    # weight [3, 8], bias [3]',
                     '  (loss): cross_entropy(label_smoothing=0.1)', ')']
    path = tmp_path / 'm.json'
    path.write_text(json.dumps(spec))
    assert repr(dp.Model(str(path))).splitlines() == lines  # from a file too
    net = dp.DataParallel(dp.Model(spec), devices='cpu:0,cpu:0')
    assert repr(net).startswith("DataParallel(devices='cpu:0,cpu:0', module=dp.Model(input [1, 4, 4]")
    assert str(net) == repr(net)


def test_tensor_repr():
    t = dp.tensor([[1.0, 2.0], [3.0, 4.5]])
    r = repr(t)
    assert r.startswith('dp.Tensor([[1.') and '4.5' in r and 'shape=(2, 2)' in r and 'dtype=float32' in r
    assert "device='cpu'" in r and str(t) == r
    big = dp.tensor(np.arange(10000).reshape(100, 100))
    r = repr(big)
    assert '...' in r and '9999' in r and 'dtype=int64' in r and len(r) < 1000
    assert 'borrowed' in repr(dp.from_numpy(np.zeros(2, np.float32)))
    assert 'shape=(0, 3)' in repr(dp.zeros((0, 3)))
    assert len(t._exports) == 0 and len(big._exports) == 0  # repr leaves no view behind


def test_zero_copy_round_trips_after_repr():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = dp.from_numpy(a)
    repr(t)
    assert np.asarray(t).ctypes.data == a.ctypes.data and t.numpy().ctypes.data == a.ctypes.data
    u = dp.from_dlpack(t)
    assert u.data_ptr == a.ctypes.data
    v = np.from_dlpack(u) if hasattr(np, 'from_dlpack') else np.asarray(u)
    assert v.ctypes.data == a.ctypes.data


def test_output_device_and_dim_as_pytorch_has_them():
    """nn.DataParallel(module, device_ids, output_device, dim): dp splits along dim 0 and gathers on
    the first device (PyTorch's default output_device), so those are taken and others refused."""
    m = dp.Model(SMALL)
    net = dp.DataParallel(m, device_ids=['cpu:0', 'cpu:1'], output_device='cpu:0', dim=0)
    assert net.num_devices == 2
    for bad, what in [(dict(output_device='cpu:1'), 'gathers outputs on the first device, cpu:0'),
                      (dict(output_device=1), r'\(cuda:1\)'), (dict(dim=1), 'dim 0 only')]:
        with pytest.raises(dp.UnsupportedError, match=what):
            dp.DataParallel(m, device_ids=['cpu:0', 'cpu:1'], **bad)
    with pytest.raises(dp.ArgumentTypeError, match='dim must be an int'):
        dp.DataParallel(m, 'cpu:0', dim=0.0)

    class TorchDevice:  # what torch.device('cpu', 0) looks like to dp
        type, index = 'cpu', 0
    assert dp.DataParallel(m, 'cpu:0', output_device=TorchDevice()).num_devices == 1


# -- PyTorch's other losses

def test_log_softmax_then_nll_trains_as_cross_entropy():
    """nn.LogSoftmax + nn.NLLLoss is nn.CrossEntropyLoss: the same steps, up to rounding."""
    def run(loss, last):
        cfg = dict(SMALL, loss=loss, layers=SMALL['layers'] + last)
        net = dp.DataParallel(dp.Model(cfg), 2)
        opt = dp.SGD(net, lr=0.1, momentum=0.9)
        losses = [net.train_step(opt, *batch(12, seed)) for seed in range(5)]
        return losses, net.module.parameters()
    w = [0.5, 2.0, 1.0]
    a, pa = run({'type': 'cross_entropy', 'weight': w}, [])
    b, pb = run({'type': 'nll', 'weight': w}, [{'type': 'log_softmax'}])
    assert np.allclose(a, b, rtol=1e-5, atol=0) and np.allclose(pa, pb, rtol=1e-5, atol=1e-6)


def test_multi_label_bce_with_logits_takes_float_targets_as_pytorch():
    cfg = dict(SMALL, loss={'type': 'bce_with_logits', 'pos_weight': [2.0, 1.0, 0.5]})
    net = dp.DataParallel(dp.Model(cfg), 2)
    opt = dp.Adam(net, lr=0.01)
    x, _ = batch(8)
    y = (np.random.default_rng(1).random((8, 3)) > 0.5)
    first = net.train_step(opt, x, y.astype(np.float32))
    for _ in range(20):
        last = net.train_step(opt, x, y.astype(np.float32))
    assert last < first
    with pytest.raises(dp.Error, match=r'target is int64 \[8, 3\]; the bce_with_logits loss needs float32'):
        net.train_step(opt, x, y.astype(np.int64))  # as PyTorch: 0/1 labels for BCE are floats
    cfg = dict(SMALL, loss={'type': 'bce'})  # probabilities: a model without sigmoid is refused, naming the row
    net = dp.DataParallel(dp.Model(cfg), 1)
    with pytest.raises(dp.Error, match=r'bce expects the model.s outputs in \[0, 1\].*at row'):
        net.train_step(dp.SGD(net, lr=0.1), x * 10, y.astype(np.float32))
