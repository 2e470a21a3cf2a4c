#!/usr/bin/env python3
"""Writes py_lr_schedulers.json: the lr PyTorch's optimizer holds at each of
N counts under torch.optim.lr_scheduler's schedulers, for
bindings/python/tests/test_lr_scheduler.py, which runs the same expression
with S = dp.lr_scheduler and o = a dp optimizer.

    ../shared/tools/torch-venv.sh; VENV/bin/python tests/reference/make_py_lr_schedulers.py

Each case: the expression, the base lr, and the lrs (read before each
optimizer.step(), scheduler.step() after, with "metrics"[i] for
ReduceLROnPlateau).
"""
import json
import os
import warnings

import torch
from torch.optim import SGD, lr_scheduler as S  # noqa: F401 (S is the expressions')

N = 60
BASE = 0.1
PLATEAU = [round(1.0 / (1 + i // 7) + 0.001 * (i % 3), 6) for i in range(N)]  # falls in steps, with small wobbles
RISING = [round(min(i, 30) * 0.01 + 0.004 * (i % 4), 6) for i in range(N)]

CASES = [
    'S.StepLR(o, step_size=7, gamma=0.5)',
    'S.MultiStepLR(o, milestones=[5, 20, 20, 40], gamma=0.3)',
    'S.ExponentialLR(o, gamma=0.93)',
    'S.ConstantLR(o, factor=0.25, total_iters=9)',
    'S.ConstantLR(o)',
    'S.LinearLR(o)',
    'S.LinearLR(o, start_factor=0.1, end_factor=0.5, total_iters=17)',
    'S.CosineAnnealingLR(o, T_max=50)',
    'S.CosineAnnealingLR(o, T_max=20, eta_min=0.01)',  # past T_max: back up, as PyTorch's
    'S.PolynomialLR(o, total_iters=40, power=2.0)',
    'S.PolynomialLR(o)',
    'S.CosineAnnealingWarmRestarts(o, T_0=10, eta_min=0.001)',
    'S.CosineAnnealingWarmRestarts(o, T_0=5, T_mult=2)',
    'S.ChainedScheduler([S.ConstantLR(o, factor=0.1, total_iters=2), S.ExponentialLR(o, gamma=0.9)])',
    'S.ChainedScheduler([S.LinearLR(o, start_factor=0.2, total_iters=8), S.CosineAnnealingWarmRestarts(o, T_0=15)])',
    'S.LambdaLR(o, lambda t: 0.95 ** t)',
    'S.LambdaLR(o, [lambda t: min(1.0, (t + 1) / 10)])',
    'S.MultiplicativeLR(o, lambda t: 0.9 if t % 2 else 1.0)',
    'S.SequentialLR(o, [S.LinearLR(o, start_factor=0.01, total_iters=10), S.CosineAnnealingLR(o, T_max=50)], '
    'milestones=[10])',
    'S.SequentialLR(o, [S.ConstantLR(o, factor=0.5, total_iters=3), S.ExponentialLR(o, gamma=0.9), '
    'S.StepLR(o, step_size=4)], milestones=[5, 12])',
    'S.OneCycleLR(o, max_lr=0.5, total_steps=60, cycle_momentum=False)',
    "S.OneCycleLR(o, max_lr=[0.5], epochs=6, steps_per_epoch=10, pct_start=0.25, anneal_strategy='linear', "
    'div_factor=10, final_div_factor=100, three_phase=True, cycle_momentum=False)',
    'S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=7, cycle_momentum=False)',
    "S.CyclicLR(o, 0.02, [0.2], step_size_up=5, step_size_down=9, mode='triangular2', cycle_momentum=False)",
    "S.CyclicLR(o, 0.01, 0.3, step_size_up=6, mode='exp_range', gamma=0.97, cycle_momentum=False)",
    "S.CyclicLR(o, 0.01, 0.1, step_size_up=4, step_size_down=0, scale_fn=lambda x: 0.9 ** x, "
    "scale_mode='iterations', cycle_momentum=False)",
    ('S.ReduceLROnPlateau(o, factor=0.5, patience=2, cooldown=1, min_lr=0.004)', PLATEAU),
    ("S.ReduceLROnPlateau(o, mode='max', threshold=0.01, threshold_mode='abs', patience=1, factor=0.7)", RISING),
    ('S.ReduceLROnPlateau(o, patience=0, eps=0.02)', PLATEAU),  # a reduction smaller than eps is skipped
]


def run(expr, metrics):
    p = torch.nn.Parameter(torch.zeros(1))
    o = SGD([p], lr=BASE, momentum=0.9)
    sched = eval(expr)
    out = []
    for i in range(N):
        out.append(o.param_groups[0]['lr'])
        o.step()
        sched.step(metrics[i]) if metrics else sched.step()
    return out


warnings.filterwarnings('ignore')
out = []
for case in CASES:
    expr, metrics = case if isinstance(case, tuple) else (case, None)
    c = {'make': expr, 'base': BASE, 'lr': run(expr, metrics)}
    if metrics:
        c['metrics'] = metrics
    out.append(c)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'py_lr_schedulers.json')
with open(path, 'w') as f:
    json.dump({'torch': torch.__version__, 'steps': N, 'cases': out}, f, indent=1)
print(f'wrote {path}: {len(out)} schedulers x {N} counts (torch {torch.__version__})')
