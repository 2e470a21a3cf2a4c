#!/usr/bin/env python3
"""Writes tests/reference/clip_accumulate.json for tests/test_training_knobs.cpp:
PyTorch's torch.nn.utils.clip_grad_norm_ and gradient accumulation
((loss / K).backward() over K micro-batches, then one step) on an MLP, with the
initial parameters in dp's order, the batches, and what PyTorch computed: each
step's gradient norm (before clipping) and losses, and the final parameters.
Run by hand (PyTorch is not a build dependency):

    ../shared/tools/torch-venv.sh   # or any venv with torch
    /root/.cache/dp-torch/bin/python tests/reference/make_clip_reference.py
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
HERE = os.path.dirname(os.path.abspath(__file__))

DP_MODEL = {
    "seed": 0, "input": {"shape": [6]},
    "layers": [{"type": "linear", "out_features": 16}, {"type": "tanh"},
               {"type": "linear", "out_features": 5}],
    "loss": {"type": "cross_entropy"},
}
CASES = [
    # (name, optimizer JSON, torch optimizer, max_norm, K micro-batches per step)
    ("sgd_clip", {"type": "sgd", "lr": 0.5, "momentum": 0.9}, lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9), 0.3, 1),
    ("adam_clip_accumulate", {"type": "adam", "lr": 0.05}, lambda p: torch.optim.Adam(p, lr=0.05), 0.3, 3),
    ("sgd_accumulate", {"type": "sgd", "lr": 0.5}, lambda p: torch.optim.SGD(p, lr=0.5), 0.0, 4),
]
STEPS, ROWS = 5, 12


def flat(tensors):
    return [float(v) for t in tensors for v in t.detach().reshape(-1).tolist()]


model0 = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))
# Large inputs, so that gradients are large and clipping acts on most steps.
xs = [torch.randn(ROWS, 6) * 3 for _ in range(STEPS * 4)]
ys = [torch.randint(0, 5, (ROWS,)) for _ in range(STEPS * 4)]
out = {"model": DP_MODEL, "params": flat(model0.parameters()), "rows": ROWS,
       "inputs": [flat([x]) for x in xs], "targets": [[int(v) for v in y] for y in ys], "cases": []}
for name, opt_json, make_opt, max_norm, k in CASES:
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 5))
    model.load_state_dict(model0.state_dict())
    opt = make_opt(model.parameters())
    losses, norms, batch = [], [], 0
    for step in range(STEPS):
        opt.zero_grad()
        for _ in range(k):
            loss = F.cross_entropy(model(xs[batch]), ys[batch])
            (loss / k).backward()
            losses.append(float(loss.detach()))
            batch += 1
        if max_norm > 0:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        opt.step()
    out["cases"].append({"name": name, "optimizer": opt_json, "max_norm": max_norm, "accumulate": k,
                         "losses": losses, "grad_norms": norms, "params_after": flat(model.parameters())})
with open(os.path.join(HERE, "clip_accumulate.json"), "w") as f:
    json.dump(out, f)
print("wrote", os.path.join(HERE, "clip_accumulate.json"))
