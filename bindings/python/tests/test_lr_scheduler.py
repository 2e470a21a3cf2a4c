"""dp.lr_scheduler against torch.optim.lr_scheduler: the same expression
(tests/reference/py_lr_schedulers.json, written with PyTorch by
make_py_lr_schedulers.py) gives the same lr at every count; resuming through
state_dict continues the curve; what dp cannot do is refused."""
import json
import math
import os

import numpy as np
import pytest

import dp
from dp import lr_scheduler as S  # noqa: N812 (the reference expressions' name)

ROOT = os.environ.get('DP_SOURCE_ROOT', os.path.normpath(os.path.join(os.path.dirname(__file__), '..', '..', '..')))
REF = json.load(open(os.path.join(ROOT, 'tests', 'reference', 'py_lr_schedulers.json')))
MODEL = {'input': {'shape': [4]}, 'seed': 1, 'loss': {'type': 'cross_entropy'},
         'layers': [{'type': 'linear', 'out_features': 3}]}


def optimizer(lr, kind=dp.SGD, **kw):
    net = dp.DataParallel(dp.Model(MODEL), devices='cpu:0')
    return kind(net, lr=lr, momentum=0.9, **kw) if kind is dp.SGD else kind(net, lr=lr, **kw)


def lrs(sched, o, counts, metrics=None, start=0):
    out = []
    for i in range(start, counts):
        out.append(o.lr)
        sched.step(metrics[i]) if metrics else sched.step()
    return out


def close(a, b):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-18) for x, y in zip(a, b))


@pytest.mark.parametrize('case', REF['cases'], ids=[c['make'].split('(')[0] for c in REF['cases']])
def test_lr_at_every_count_is_pytorchs(case):
    o = optimizer(case['base'])
    sched = eval(case['make'])
    got = lrs(sched, o, REF['steps'], case.get('metrics'))
    assert close(got, case['lr']), (case['make'], [(i, a, b) for i, (a, b) in enumerate(zip(got, case['lr']))
                                                   if not math.isclose(a, b, rel_tol=1e-12)][:5])
    assert sched.get_last_lr() == [o.lr] and o.param_groups[0]['lr'] == o.lr


@pytest.mark.parametrize('case', REF['cases'], ids=[c['make'].split('(')[0] for c in REF['cases']])
def test_resumed_through_state_dict_continues_the_curve(case):
    """Stopped after 23 counts, resumed as in PyTorch: a new optimizer and
    scheduler made as before, then each given its state_dict."""
    o = optimizer(case['base'])
    sched = eval(case['make'])
    lrs(sched, o, 23, case.get('metrics'))
    saved_opt, saved = o.state_dict(), sched.state_dict()
    assert 'optimizer' not in saved
    o2 = optimizer(case['base'])
    s2 = eval(case['make'].replace('(o', '(o2'), {'S': S, 'o2': o2})
    o2.load_state_dict(saved_opt)
    s2.load_state_dict(saved)
    assert close(lrs(s2, o2, REF['steps'], case.get('metrics'), start=23), case['lr'][23:]), case['make']


def test_resumed_through_a_checkpoint_continues_the_curve(tmp_path):
    """dp.save_checkpoint keeps the optimizer's lr and initial_lr (as PyTorch's
    optimizer state dict does): make the optimizer and scheduler, load the
    checkpoint and the scheduler's state dict, and the run goes on as the
    straight one (the lr was the optimizer's initial one: the resumed run
    trained 0.03 apart, silently)."""
    x = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    y = np.arange(16) % 3

    def make():
        o = optimizer(0.01, dp.Adam)
        return o, S.CosineAnnealingLR(o, T_max=6)

    o, sched = make()
    seen = []
    for epoch in range(6):
        o.group.train_step(o, x, y)
        sched.step()
        seen.append(o.lr)
        if epoch == 2:
            dp.save_checkpoint(tmp_path / 'c.safetensors', o.group, o, metadata={'epoch': epoch})
            sd = sched.state_dict()
    o2, sched2 = make()
    dp.load_checkpoint(tmp_path / 'c.safetensors', o2.group, o2)
    sched2.load_state_dict(sd)
    assert o2.lr == seen[2] and o2.param_groups[0]['initial_lr'] == 0.01
    for epoch in range(3, 6):
        o2.group.train_step(o2, x, y)
        sched2.step()
        assert o2.lr == seen[epoch]
    assert np.array_equal(o2.group.model.parameters(), o.group.model.parameters())
    with pytest.raises(ValueError, match='reserved'):
        dp.save_checkpoint(tmp_path / 'd.safetensors', o.group, o, metadata={'python_param_group_lrs': 1})


def test_warm_restarts_take_fractional_epochs():
    """CosineAnnealingWarmRestarts.step(epoch + i / iters), per batch as
    PyTorch's docs show: the cycle the epoch falls in (T_0 10, T_mult 2: the
    second cycle, 20 long, from epoch 10), values checked against PyTorch 2.15."""
    o = optimizer(0.1)
    sched = S.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=2, eta_min=0.01)
    sched.step(12.5)
    assert o.lr == 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * 2.5 / 20)) / 2
    sched.step(3.25)
    assert o.lr == 0.01 + (0.1 - 0.01) * (1 + math.cos(math.pi * 3.25 / 10)) / 2
    with pytest.raises(ValueError, match='non-negative epoch'):
        sched.step(-1)


def test_the_scheduled_lr_is_the_one_the_step_uses():
    """Two identical runs, one with ExponentialLR, one setting the same lr by
    hand: the same weights after 6 steps."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    runs = []
    for scheduled in (True, False):
        net = dp.DataParallel(dp.Model(MODEL), devices='cpu:0,cpu:1')
        o = dp.SGD(net, lr=0.5, momentum=0.9)
        sched = S.ExponentialLR(o, gamma=0.5) if scheduled else None
        for t in range(6):
            if not scheduled:
                o.lr = 0.5 * 0.5 ** t
            net.train_step(o, x, y)
            if sched:
                sched.step()
        runs.append(net.module.parameters())
    assert np.array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0], dp.Model(MODEL).parameters())


def test_initial_lr_is_kept_as_pytorchs_param_groups_keep_it():
    o = optimizer(0.1)
    assert 'initial_lr' not in o.param_groups[0]
    sched = S.LinearLR(o, start_factor=0.5, total_iters=4)
    assert o.lr == 0.05 and o.param_groups[0]['initial_lr'] == 0.1
    S.StepLR(o, step_size=2)  # a second scheduler's base: the lr before the first
    assert o.param_groups[0]['initial_lr'] == 0.1 and sched.base_lrs == [0.1]
    saved = o.state_dict()
    assert saved['param_groups'][0]['initial_lr'] == 0.1
    o2 = optimizer(0.1)
    with pytest.raises(dp.UnknownKeyError, match='initial_lr'):  # a KeyError, as PyTorch's
        S.StepLR(o2, step_size=2, last_epoch=3)
    o2.load_state_dict(saved)
    resumed = S.StepLR(o2, step_size=2, last_epoch=3)  # PyTorch's way to resume: initial_lr from the optimizer
    assert resumed.base_lrs == [0.1] and resumed.last_epoch == 4
    o2.param_groups[0]['initial_lr'] = 0.2
    assert S.ExponentialLR(o2, gamma=0.5).base_lrs == [0.2]
    o4 = optimizer(0.1)
    o4.param_groups[0]['initial_lr'] = 0.3  # set by hand before any scheduler, as PyTorch allows
    assert S.StepLR(o4, step_size=2, last_epoch=3).base_lrs == [0.3]


def test_cyclic_lr_refusals_and_a_callable_scale_fn_in_its_state_dict():
    """CyclicLR: what dp cannot do (cycle momentum) and what PyTorch would
    divide by zero on are refused; a scale_fn that is a callable object keeps
    its attributes in the state dict, as PyTorch's (a function is not kept)."""
    o = optimizer(0.1)
    with pytest.raises(dp.UnsupportedError, match='cycle_momentum=False'):
        S.CyclicLR(o, 0.01, 0.1)  # PyTorch's default cycles momentum; dp fixes it
    with pytest.raises(dp.InvalidArgumentError, match='mode is invalid'):
        S.CyclicLR(o, 0.01, 0.1, mode='square', cycle_momentum=False)
    with pytest.raises(dp.InvalidArgumentError, match='step_size_up'):
        S.CyclicLR(o, 0.01, 0.1, step_size_up=0, cycle_momentum=False)

    class Scale:
        def __init__(self, base=0.5):
            self.base = base

        def __call__(self, x):
            return self.base ** x

    o = optimizer(0.1)
    sched = S.CyclicLR(o, 0.01, 0.1, step_size_up=3, scale_fn=Scale(0.8), cycle_momentum=False)
    assert o.lr == 0.01 and o.param_groups[0]['initial_lr'] == 0.01
    straight = lrs(sched, o, 20)
    assert straight[3] == pytest.approx(0.01 + 0.09 * 0.8)  # the first peak, scaled by the first cycle's 0.8
    o = optimizer(0.1)
    sched = S.CyclicLR(o, 0.01, 0.1, step_size_up=3, scale_fn=Scale(0.8), cycle_momentum=False)
    lrs(sched, o, 7)
    saved_opt, saved = o.state_dict(), sched.state_dict()
    assert saved['_scale_fn_custom'] == {'base': 0.8}
    o2 = optimizer(0.1)
    s2 = S.CyclicLR(o2, 0.01, 0.1, step_size_up=3, scale_fn=Scale(), cycle_momentum=False)
    o2.load_state_dict(saved_opt)
    s2.load_state_dict(saved)
    assert close(lrs(s2, o2, 20, start=7), straight[7:])


def test_what_dp_cannot_do_is_refused_with_a_reason():
    o = optimizer(0.1)
    with pytest.raises(dp.UnsupportedError, match='cycle_momentum=False'):
        S.OneCycleLR(o, max_lr=0.5, total_steps=10)  # PyTorch's default cycles momentum; dp fixes it
    sched = S.OneCycleLR(o, max_lr=0.5, total_steps=3, cycle_momentum=False)
    for _ in range(3):
        sched.step()
    with pytest.raises(dp.InvalidArgumentError, match='Tried to step 4 times'):
        sched.step()
    scheduled = optimizer(0.1).set_lr_schedule({'type': 'cosine', 'T_max': 10})
    with pytest.raises(dp.InvalidArgumentError, match='set_lr_schedule'):
        S.StepLR(scheduled, step_size=2)
    o3 = optimizer(0.1)
    S.StepLR(o3, step_size=2)
    with pytest.raises(dp.InvalidArgumentError, match='dp.lr_scheduler'):  # the other way round too
        o3.set_lr_schedule({'type': 'cosine', 'T_max': 10})
    with pytest.raises(dp.ArgumentTypeError, match='not a dp Optimizer'):
        S.StepLR(object(), step_size=2)
    for bad in (lambda: S.StepLR(o, step_size=0), lambda: S.LinearLR(o, start_factor=0),
                lambda: S.ConstantLR(o, factor=2), lambda: S.ReduceLROnPlateau(o, factor=1.5),
                lambda: S.ReduceLROnPlateau(o, mode='up'), lambda: S.LambdaLR(o, [abs, abs]),
                lambda: S.SequentialLR(o, [S.StepLR(o, step_size=2)], milestones=[3])):
        with pytest.raises(dp.InvalidArgumentError):
            bad()
    with pytest.raises(dp.ArgumentTypeError, match='metrics'):
        S.ReduceLROnPlateau(o).step('low')
    # Every refusal is also the builtin exception PyTorch raises there.
    assert issubclass(dp.InvalidArgumentError, ValueError) and issubclass(dp.UnknownKeyError, KeyError)
