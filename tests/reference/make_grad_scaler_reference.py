#!/usr/bin/env python3
"""Writes tests/reference/grad_scaler.json for tests/test_grad_scaler.cpp:
PyTorch's torch.amp.GradScaler("cpu") on float32 (scaler.scale(loss).backward(),
scaler.unscale_ then clip_grad_norm_ when clipping, scaler.step, scaler.update,
and a scheduler stepped every iteration), on an MLP whose scaled gradients
overflow float32 for large scales, started above that so that the first
steps are skipped, with a small growth_interval so that the scale grows into
an overflow again. With the initial parameters in dp's order and the
batches: each step's scale (before the step), whether it was skipped, its
loss and learning rate, and the final scale, growth tracker and parameters.

Every step is checked to be 5% away from the edge: a skipped step's scaled
gradients exceed float32's largest value whatever order they are summed in,
and a clean step's stay below it in every partial sum of consecutive terms
(sequential, blocked, split over devices by rows), so any implementation
that sums so skips the same steps.

Run by hand (PyTorch is not a build dependency):

    ../shared/tools/torch-venv.sh   # or any venv with torch
    eval "$(../shared/tools/torch-venv.sh ~/.cache/dp-torch --env)"; "$TORCH_PY" tests/reference/make_grad_scaler_reference.py
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

# Seed 4: the first whose steps all keep a 5% margin from the edge (the check below).
torch.manual_seed(4)
HERE = os.path.dirname(os.path.abspath(__file__))
FLT_MAX = float(torch.finfo(torch.float32).max)

DP_MODEL = {
    "seed": 0, "input": {"shape": [6]},
    "layers": [{"type": "linear", "out_features": 16}, {"type": "tanh"},
               {"type": "linear", "out_features": 5}],
    "loss": {"type": "mse"},
}
STEPS, ROWS = 30, 12
CASES = [
    # (name, optimizer JSON, torch optimizer, GradScaler kwargs, max_norm, dp schedule, torch scheduler)
    ("sgd", {"type": "sgd", "lr": 0.002, "momentum": 0.9}, lambda p: torch.optim.SGD(p, lr=0.002, momentum=0.9),
     {"init_scale": 2.0 ** 124, "growth_interval": 3}, 0.0, None, None),
    ("adam_clip", {"type": "adam", "lr": 0.05}, lambda p: torch.optim.Adam(p, lr=0.05),
     {"init_scale": 2.0 ** 126, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 2}, 50.0, None, None),
    ("sgd_steplr", {"type": "sgd", "lr": 0.002}, lambda p: torch.optim.SGD(p, lr=0.002),
     {"init_scale": 2.0 ** 122, "growth_interval": 4}, 0.0, {"type": "step", "step_size": 5, "gamma": 0.5},
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=5, gamma=0.5)),
]


def flat(tensors):
    return [float(v) for t in tensors for v in t.detach().reshape(-1).tolist()]


def overflow_margin(model, x, y, scale):
    """(largest |exact scaled gradient| anywhere in backward, largest |sum of
    a run of consecutive terms|), in float64, for this model, batch and
    scale: the partial sums of every order that sums runs of consecutive
    terms (sequentially either way, in blocks, split over devices by rows,
    as BLAS kernels and dp's replicas do)."""
    w1, b1, w2, b2 = [p.detach().double() for p in model.parameters()]
    x = x.double()
    h = torch.tanh(x @ w1.T + b1)
    out = h @ w2.T + b2
    n = out.numel()
    dout = 2 * (out - y.double()) / n * scale              # mse's gradient, times the scale
    dh_terms = dout[:, :, None] * w2[None, :, :]           # [r, j, k]: dh[r, k] = sum_j
    dpre = dh_terms.sum(1) * (1 - h * h)
    sums = [  # (terms, the dimension summed)
        (dout[:, :, None] * h[:, None, :], 0),             # dw2[j, k] = sum_r dout[r, j] h[r, k]
        (dout, 0),                                         # db2
        (dh_terms, 1),                                     # dh
        (dpre[:, :, None] * x[:, None, :], 0),             # dw1[k, i] = sum_r dpre[r, k] x[r, i]
        (dpre, 0),                                         # db1
    ]
    exact = float(dout.abs().max())
    bound = exact
    for terms, dim in sums:
        exact = max(exact, float(terms.sum(dim).abs().max()))
        # Every run of consecutive terms: differences of the prefix sums.
        c = torch.cat([torch.zeros_like(terms.narrow(dim, 0, 1)), terms.cumsum(dim)], dim)
        bound = max(bound, float((c.unsqueeze(dim) - c.unsqueeze(dim + 1)).abs().max()))
    return exact, bound


model0 = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))
xs = [torch.randn(ROWS, 6) * 3 for _ in range(STEPS)]
ys = [torch.randn(ROWS, 5) * 100 for _ in range(STEPS)]  # large targets: large gradients
out = {"model": DP_MODEL, "params": flat(model0.parameters()), "rows": ROWS,
       "inputs": [flat([x]) for x in xs], "targets": [flat([y]) for y in ys], "cases": []}
for name, opt_json, make_opt, scaler_kw, max_norm, dp_sched, make_sched in CASES:
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))
    model.load_state_dict(model0.state_dict())
    opt = make_opt(model.parameters())
    sched = make_sched(opt) if make_sched else None
    scaler = torch.amp.GradScaler("cpu", **scaler_kw)
    scales, skipped, losses, lrs = [], [], [], []
    for step in range(STEPS):
        scale = scaler.get_scale()
        exact, bound = overflow_margin(model, xs[step], ys[step], scale)
        opt.zero_grad()
        loss = F.mse_loss(model(xs[step]), ys[step])
        scaler.scale(loss).backward()
        if max_norm > 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        lrs.append(float(opt.param_groups[0]["lr"]))
        scaler.step(opt)
        scaler.update()
        skip = scaler.get_scale() < scale
        if skip:
            assert exact > 1.05 * FLT_MAX, f"{name} step {step}: skipped, but only {exact / FLT_MAX:.4g} x FLT_MAX"
        else:
            assert bound < 0.95 * FLT_MAX, f"{name} step {step}: taken, but a sum may reach {bound / FLT_MAX:.4g} x FLT_MAX"
        if sched:
            sched.step()
        scales.append(scale)
        skipped.append(int(skip))
        losses.append(float(loss.detach()))
    print(name, "skipped:", "".join(str(s) for s in skipped), "final scale 2^%g" % torch.log2(torch.tensor(scaler.get_scale())))
    assert 3 <= sum(skipped) < STEPS - 5
    dp_scaler = dict(scaler_kw)
    out["cases"].append({"name": name, "optimizer": opt_json, "grad_scaler": dp_scaler, "max_norm": max_norm,
                         "lr_schedule": dp_sched, "scales": scales, "skipped": skipped, "losses": losses, "lrs": lrs,
                         "final_scale": scaler.get_scale(), "final_growth_tracker": scaler._get_growth_tracker(),
                         "params_after": flat(model.parameters())})
with open(os.path.join(HERE, "grad_scaler.json"), "w") as f:
    json.dump(out, f)
print("wrote", os.path.join(HERE, "grad_scaler.json"))
