#!/usr/bin/env python3
"""Writes tests/reference/losses.json, which tests/layers/test_losses.cpp reads:
PyTorch's value and input gradient of each loss dp has (reduction="mean", and
each with reduction="sum"), and
of the layers log_softmax and layer_norm (with layer_norm's parameter gradients), on float32 inputs, computed in float64 (so the reference is
the formula's exact value, not float32 rounding). Run by hand (PyTorch is not
a build dependency):

    eval "$(../shared/tools/torch-venv.sh ~/.cache/dp-torch --env)"
    "$TORCH_PY" tests/reference/make_loss_reference.py
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
g = torch.Generator().manual_seed(7)


def f32(*shape, lo=-3.0, hi=3.0):
    return (torch.rand(*shape, generator=g) * (hi - lo) + lo).float()


def case(name, loss, module, x, t, x_torch=None):
    """x, t: what dp sees (float32; int64 class targets). module: the torch loss."""
    xd = (x if x_torch is None else x_torch).double().requires_grad_(True)
    td = t.double() if t.dtype == torch.float32 else t
    v = module(xd, td)
    v.backward()
    return {"name": name, "loss": loss, "shape": list(x.shape), "input": x.reshape(-1).tolist(),
            "target": t.reshape(-1).tolist(), "value": float(v.detach()), "grad": xd.grad.reshape(-1).tolist()}


def d(v):
    return torch.tensor(v, dtype=torch.float64)


cases = []
# Regression losses: a few elements exactly on target (d = 0) and on the joins |d| = beta, delta.
x = f32(5, 4)
t = f32(5, 4)
t[0, 0] = x[0, 0]
t[1, 1] = x[1, 1] - 1.0
t[2, 2] = x[2, 2] + 0.5
cases.append(case("l1", {"type": "l1"}, nn.L1Loss(), x, t))
for beta in (1.0, 0.5, 0.0):
    cases.append(case(f"smooth_l1 beta {beta}", {"type": "smooth_l1", "beta": beta}, nn.SmoothL1Loss(beta=beta), x, t))
for delta in (1.0, 0.3):
    cases.append(case(f"huber delta {delta}", {"type": "huber", "delta": delta}, nn.HuberLoss(delta=delta), x, t))
# A per-sample shape of two dims: [3, 2, 4].
x3, t3 = f32(3, 2, 4), f32(3, 2, 4)
cases.append(case("huber [2, 4] per sample", {"type": "huber"}, nn.HuberLoss(), x3, t3))

# Binary cross entropy: probabilities, with 0 and 1 exactly (the -100 clamp); soft targets too.
p = f32(6, 3, lo=0.02, hi=0.98)
p[0, 0], p[1, 1], p[2, 2] = 0.0, 1.0, 1.0
y = (torch.rand(6, 3, generator=g) > 0.5).float()
y[0, 0], y[1, 1], y[2, 2] = 1.0, 0.0, 1.0
y[3] = torch.tensor([0.25, 0.5, 0.9])
w = [0.5, 2.0, 1.0]
cases.append(case("bce", {"type": "bce"}, nn.BCELoss(), p, y))
cases.append(case("bce weight", {"type": "bce", "weight": w}, nn.BCELoss(weight=d(w)), p, y))
# With logits, some large (where sigmoid then bce would round to 0 or 1).
z = f32(6, 3, lo=-6, hi=6)
z[0, 0], z[1, 1], z[2, 2] = 40.0, -40.0, 0.0
pw = [3.0, 0.5, 1.0]
cases.append(case("bce_with_logits", {"type": "bce_with_logits"}, nn.BCEWithLogitsLoss(), z, y))
cases.append(case("bce_with_logits weight", {"type": "bce_with_logits", "weight": w},
                  nn.BCEWithLogitsLoss(weight=d(w)), z, y))
cases.append(case("bce_with_logits pos_weight", {"type": "bce_with_logits", "pos_weight": pw},
                  nn.BCEWithLogitsLoss(pos_weight=d(pw)), z, y))
cases.append(case("bce_with_logits weight pos_weight", {"type": "bce_with_logits", "weight": w, "pos_weight": pw},
                  nn.BCEWithLogitsLoss(weight=d(w), pos_weight=d(pw)), z, y))

# Negative log likelihood on log-probabilities, with class weights and ignored rows.
lp = F.log_softmax(f32(7, 5), dim=1).float()
tc = torch.tensor([0, 4, 2, -100, 1, 3, 4])
tc_plain = torch.tensor([0, 4, 2, 2, 1, 3, 4])
wc = [0.5, 2.0, 1.0, 0.25, 3.0]
cases.append(case("nll", {"type": "nll"}, nn.NLLLoss(), lp, tc_plain))
cases.append(case("nll ignore_index", {"type": "nll"}, nn.NLLLoss(), lp, tc))
cases.append(case("nll weight ignore_index", {"type": "nll", "weight": wc}, nn.NLLLoss(weight=d(wc)), lp, tc))
cases.append(case("nll weight ignore_index 2", {"type": "nll", "weight": wc, "ignore_index": 2},
                  nn.NLLLoss(weight=d(wc), ignore_index=2), lp, tc_plain))

# log_softmax, as a layer: its output and input gradient for an upstream gradient gout.
layers = []
for shape, dim in (([4, 6], -1), ([3, 4, 5], 1), ([2, 3, 4, 2], 2)):
    xs = f32(*shape, lo=-5, hi=5)
    gs = f32(*shape, lo=-1, hi=1)
    xd = xs.double().requires_grad_(True)
    yd = F.log_softmax(xd, dim=dim)
    yd.backward(gs.double())
    layers.append({"shape": shape, "dim": dim, "input": xs.reshape(-1).tolist(), "gout": gs.reshape(-1).tolist(),
                   "output": yd.detach().reshape(-1).tolist(), "grad": xd.grad.reshape(-1).tolist()})

# layer_norm: output, input gradient and parameter gradients for an upstream gradient gout; one case's
# rows sit far from 0 (a mean of 1000 against a spread of 1: the variance is taken about the mean).
norms = []
for shape, ns, args in (([4, 6], [6], {}), ([3, 2, 5], [2, 5], {"eps": 1e-3}),
                        ([2, 3, 4, 2], [4, 2], {"elementwise_affine": False}), ([5, 7], [7], {"bias": False}),
                        ([3, 8], [8], {"offset": 1000.0})):
    args = dict(args)
    offset = args.pop("offset", 0.0)
    xs = f32(*shape) + offset
    gs = f32(*shape, lo=-1, hi=1)
    m = nn.LayerNorm(ns, eps=args.get("eps", 1e-5), elementwise_affine=args.get("elementwise_affine", True),
                     bias=args.get("bias", True)).double()
    params = {}
    with torch.no_grad():
        for name, p in m.named_parameters():
            v = f32(*p.shape, lo=-2, hi=2)
            p.copy_(v.double())
            params[name] = v.reshape(-1).tolist()
    xd = xs.double().requires_grad_(True)
    yd = m(xd)
    yd.backward(gs.double())
    norms.append({"shape": shape, "layer": {"type": "layer_norm", "normalized_shape": ns, **args},
                  "input": xs.reshape(-1).tolist(), "gout": gs.reshape(-1).tolist(), "params": params,
                  "output": yd.detach().reshape(-1).tolist(), "grad": xd.grad.reshape(-1).tolist(),
                  "param_grads": {name: p.grad.reshape(-1).tolist() for name, p in m.named_parameters()}})

# reduction="sum", every loss, on inputs drawn after everything above (so the cases above keep their values):
# cross entropy with weights, an ignored row and smoothing too (a batch's sum, no denominator).
xs, ts = f32(5, 4), f32(5, 4)
ps = f32(5, 4, lo=0.05, hi=0.95)
ys = (torch.rand(5, 4, generator=g) > 0.5).float()
zs = f32(6, 5)
cs = torch.tensor([0, 4, 2, -100, 1, 3])
cs_plain = torch.tensor([0, 4, 2, 2, 1, 3])
w5 = [0.5, 2.0, 1.0, 0.25, 3.0]
sums = [
    ("mse", {}, nn.MSELoss(reduction="sum"), xs, ts),
    ("l1", {}, nn.L1Loss(reduction="sum"), xs, ts),
    ("smooth_l1", {"beta": 0.5}, nn.SmoothL1Loss(beta=0.5, reduction="sum"), xs, ts),
    ("huber", {"delta": 0.3}, nn.HuberLoss(delta=0.3, reduction="sum"), xs, ts),
    ("bce", {"weight": [1.0, 0.5, 2.0, 1.0]}, nn.BCELoss(weight=d([1.0, 0.5, 2.0, 1.0]), reduction="sum"), ps, ys),
    ("bce_with_logits", {"pos_weight": [3.0, 1.0, 0.5, 2.0]},
     nn.BCEWithLogitsLoss(pos_weight=d([3.0, 1.0, 0.5, 2.0]), reduction="sum"), xs, ys),
    ("cross_entropy", {}, nn.CrossEntropyLoss(reduction="sum"), zs, cs_plain),
    ("cross_entropy", {"weight": w5, "label_smoothing": 0.2},
     nn.CrossEntropyLoss(weight=d(w5), label_smoothing=0.2, reduction="sum"), zs, cs),
    ("nll", {"weight": w5}, nn.NLLLoss(weight=d(w5), reduction="sum"), F.log_softmax(zs, dim=1).float(), cs),
]
for loss_type, args, module, x_, t_ in sums:
    cases.append(case(f"{loss_type} sum {args}", {"type": loss_type, **args, "reduction": "sum"}, module, x_, t_))

with open(os.path.join(HERE, "losses.json"), "w") as f:
    json.dump({"torch": torch.__version__, "losses": cases, "log_softmax": layers, "layer_norm": norms}, f)
print(len(cases), "losses,", len(layers), "log_softmax cases,", len(norms), "layer_norm cases, torch", torch.__version__)
