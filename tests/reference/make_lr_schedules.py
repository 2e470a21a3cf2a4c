#!/usr/bin/env python3
"""Writes lr_schedules.json: the learning rate of each optimizer step under
PyTorch's schedulers, for tests/test_schedules.cpp to compare dp's with.

    ../shared/tools/torch-venv.sh; VENV/bin/python tests/reference/make_lr_schedules.py

Each case: dp's schedule JSON, the base lr, and the lr PyTorch's optimizer
holds at steps 0..N-1 (read before optimizer.step(), scheduler.step() after).
"""
import json
import os

import torch
from torch.optim import SGD, lr_scheduler as S

N = 60
BASE = 0.1


def run(make, base=BASE, steps=N):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = SGD([p], lr=base, momentum=0.9)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]['lr'])
        opt.step()
        sched.step()
    return out


cases = [
    ({"type": "constant"}, lambda o: S.ConstantLR(o, factor=1.0, total_iters=0)),
    ({"type": "linear"}, lambda o: S.LinearLR(o)),
    ({"type": "linear", "start_factor": 0.1, "end_factor": 0.5, "total_iters": 17},
     lambda o: S.LinearLR(o, start_factor=0.1, end_factor=0.5, total_iters=17)),
    ({"type": "step", "step_size": 7, "gamma": 0.5}, lambda o: S.StepLR(o, step_size=7, gamma=0.5)),
    ({"type": "exponential", "gamma": 0.93}, lambda o: S.ExponentialLR(o, gamma=0.93)),
    ({"type": "multistep", "milestones": [5, 20, 21, 40]}, lambda o: S.MultiStepLR(o, milestones=[5, 20, 21, 40])),
    ({"type": "cosine", "T_max": 50}, lambda o: S.CosineAnnealingLR(o, T_max=50)),
    ({"type": "cosine", "T_max": 25, "eta_min": 0.01}, lambda o: S.CosineAnnealingLR(o, T_max=25, eta_min=0.01)),
    ({"type": "cosine_warmup", "warmup_steps": 10, "total_steps": 60, "warmup_start_factor": 0.01},
     lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.01, total_iters=10), S.CosineAnnealingLR(o, T_max=50)],
                              milestones=[10])),
    ({"type": "onecycle", "max_lr": 0.5, "total_steps": 60},
     lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=60, cycle_momentum=False)),
    ({"type": "onecycle", "max_lr": 0.5, "total_steps": 60, "pct_start": 0.25, "anneal_strategy": "linear",
      "div_factor": 10, "final_div_factor": 100, "three_phase": True},
     lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=60, pct_start=0.25, anneal_strategy='linear', div_factor=10,
                            final_div_factor=100, three_phase=True, cycle_momentum=False)),
]
import warnings
warnings.filterwarnings('ignore')
out = [{"schedule": s, "base": BASE, "lr": run(make)} for s, make in cases]
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'lr_schedules.json')
with open(path, 'w') as f:
    json.dump({"torch": torch.__version__, "cases": out}, f, indent=1)
print(f'wrote {path}: {len(out)} schedules x {N} steps (torch {torch.__version__})')
