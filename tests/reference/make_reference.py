#!/usr/bin/env python3
"""Writes the PyTorch reference files that tests/test_pytorch_reference.cpp reads.

Each file holds a dp model (JSON), the same model's initial parameters in dp's
order (= PyTorch's module.parameters() order), an input batch and target, and
what PyTorch computes from them: the output, the loss and gradients of the
first step, the losses of a few optimizer steps, the final parameters and the
running statistics. Run by hand (PyTorch is not a build dependency); another machine's PyTorch
kernels may change the earlier files in their last bits (2026-12-06: by at
most 1.6e-7), so keep those unless a case itself changed:

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch numpy
    /tmp/torchenv/bin/python tests/reference/make_reference.py
"""
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_default_dtype(torch.float32)
HERE = os.path.dirname(os.path.abspath(__file__))


class Residual(nn.Module):
    """A DAG with the same parameter order as the dp JSON below."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.branch = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2, bias=False)
        self.side = nn.Conv2d(3, 2, 1, stride=1)
        self.head = nn.Linear(6 * 3 * 3, 5)

    def forward(self, x):
        a = F.leaky_relu(self.stem(x), 0.1)
        b = self.branch(a)
        r = torch.tanh(a + b)
        s = torch.sigmoid(self.side(x))
        c = torch.cat([r, s], dim=1)
        p = F.avg_pool2d(c, 3, stride=2, padding=1, count_include_pad=False)
        return self.head(p.flatten(1))


CASES = [
    dict(
        name="cnn_bn_sgd",
        dp_model={
            "seed": 0, "input": {"shape": [2, 8, 8]},
            "layers": [
                {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
                {"type": "batch_norm2d", "momentum": 0.2},
                {"type": "relu"},
                {"type": "max_pool2d", "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
                {"type": "conv2d", "out_channels": 6, "kernel_size": [2, 3], "stride": [1, 2], "groups": 2},
                {"type": "gelu"},
                {"type": "global_avg_pool"},
                {"type": "linear", "out_features": 5},
                {"type": "dropout", "p": 0.0},
                {"type": "linear", "out_features": 4},
            ],
            "loss": {"type": "cross_entropy", "label_smoothing": 0.1},
        },
        torch_model=lambda: nn.Sequential(
            nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4, momentum=0.2), nn.ReLU(),
            nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
            nn.Conv2d(4, 6, (2, 3), stride=(1, 2), groups=2), nn.GELU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5), nn.Dropout(0.0), nn.Linear(5, 4)),
        input_shape=[6, 2, 8, 8], classes=4,
        loss=lambda out, t: F.cross_entropy(out, t, label_smoothing=0.1),
        optimizer={"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True},
        torch_opt=lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    ),
    dict(
        name="mlp_mse_adam",
        dp_model={
            "seed": 0, "input": {"shape": [5]},
            "layers": [
                {"type": "linear", "out_features": 7}, {"type": "tanh"},
                {"type": "batch_norm1d", "affine": False},
                {"type": "linear", "out_features": 6, "bias": False}, {"type": "gelu", "approximate": "tanh"},
                {"type": "linear", "out_features": 3}, {"type": "sigmoid"},
            ],
            "loss": {"type": "mse"},
        },
        torch_model=lambda: nn.Sequential(
            nn.Linear(5, 7), nn.Tanh(), nn.BatchNorm1d(7, affine=False), nn.Linear(7, 6, bias=False),
            nn.GELU(approximate="tanh"), nn.Linear(6, 3), nn.Sigmoid()),
        input_shape=[9, 5], mse_shape=[9, 3],
        loss=F.mse_loss,
        optimizer={"type": "adam", "lr": 0.01, "betas": [0.8, 0.99], "weight_decay": 0.001},
        torch_opt=lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.001),
    ),
    dict(
        name="dag_adamw",
        dp_model={
            "seed": 0, "input": {"shape": [3, 6, 6]},
            "layers": [
                {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "name": "stem"},
                {"type": "leaky_relu", "negative_slope": 0.1, "name": "a"},
                {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 2, "dilation": 2, "groups": 2,
                 "bias": False, "name": "branch"},
                {"type": "add", "inputs": ["a", "branch"]},
                {"type": "tanh", "name": "r"},
                {"type": "conv2d", "out_channels": 2, "kernel_size": 1, "inputs": ["input"], "name": "side"},
                {"type": "sigmoid", "name": "s"},
                {"type": "concat", "inputs": ["r", "s"], "dim": 1},
                {"type": "avg_pool2d", "kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
                {"type": "flatten"},
                {"type": "linear", "out_features": 5, "name": "head"},
            ],
            "loss": {"type": "cross_entropy"},
        },
        torch_model=Residual,
        input_shape=[7, 3, 6, 6], classes=5,
        loss=F.cross_entropy,
        optimizer={"type": "adamw", "lr": 0.02, "weight_decay": 0.1},
        torch_opt=lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.1),
    ),
    dict(
        name="mlp_nll_sgd",
        dp_model={
            "seed": 0, "input": {"shape": [6]},
            "layers": [
                {"type": "linear", "out_features": 8}, {"type": "relu"},
                {"type": "linear", "out_features": 4}, {"type": "log_softmax"},
            ],
            "loss": {"type": "nll", "weight": [0.5, 2.0, 1.0, 3.0]},
        },
        torch_model=lambda: nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4), nn.LogSoftmax(dim=-1)),
        input_shape=[9, 6], classes=4,
        loss=lambda out, t: F.nll_loss(out, t, weight=torch.tensor([0.5, 2.0, 1.0, 3.0])),
        optimizer={"type": "sgd", "lr": 0.2, "momentum": 0.9},
        torch_opt=lambda p: torch.optim.SGD(p, lr=0.2, momentum=0.9),
    ),
    dict(
        name="mlp_bce_logits_adamw",
        dp_model={
            "seed": 0, "input": {"shape": [5]},
            "layers": [
                {"type": "linear", "out_features": 7}, {"type": "tanh"}, {"type": "linear", "out_features": 3},
            ],
            "loss": {"type": "bce_with_logits", "weight": [1.0, 0.5, 2.0], "pos_weight": [3.0, 1.0, 0.25]},
        },
        torch_model=lambda: nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)),
        input_shape=[8, 5], mse_shape=[8, 3],
        loss=lambda out, t: F.binary_cross_entropy_with_logits(
            out, t, weight=torch.tensor([1.0, 0.5, 2.0]), pos_weight=torch.tensor([3.0, 1.0, 0.25])),
        optimizer={"type": "adamw", "lr": 0.05, "weight_decay": 0.01},
        torch_opt=lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.01),
    ),
    dict(
        name="mlp_huber_sgd",
        dp_model={
            "seed": 0, "input": {"shape": [4]},
            "layers": [
                {"type": "linear", "out_features": 6}, {"type": "sigmoid"}, {"type": "linear", "out_features": 2},
            ],
            "loss": {"type": "huber", "delta": 0.5},
        },
        torch_model=lambda: nn.Sequential(nn.Linear(4, 6), nn.Sigmoid(), nn.Linear(6, 2)),
        input_shape=[10, 4], mse_shape=[10, 2],
        loss=lambda out, t: F.huber_loss(out, t, delta=0.5),
        target_range=(-2.0, 2.0),  # both of huber's pieces
        optimizer={"type": "sgd", "lr": 0.3},
        torch_opt=lambda p: torch.optim.SGD(p, lr=0.3),
    ),
    dict(
        name="mlp_layer_norm_adam",
        dp_model={
            "seed": 0, "input": {"shape": [2, 6]},
            "layers": [
                {"type": "linear", "out_features": 8},
                {"type": "layer_norm", "normalized_shape": [2, 8], "eps": 1e-4}, {"type": "tanh"},
                {"type": "flatten"}, {"type": "linear", "out_features": 3},
            ],
            "loss": {"type": "cross_entropy"},
        },
        torch_model=lambda: nn.Sequential(nn.Linear(6, 8), nn.LayerNorm([2, 8], eps=1e-4), nn.Tanh(), nn.Flatten(),
                                          nn.Linear(16, 3)),
        input_shape=[9, 2, 6], classes=3,
        loss=F.cross_entropy,
        optimizer={"type": "adam", "lr": 0.05},
        torch_opt=lambda p: torch.optim.Adam(p, lr=0.05),
    ),
]

STEPS = 4


def flat(tensors):
    return [float(v) for t in tensors for v in t.detach().reshape(-1).tolist()]


for case in CASES:
    model = case["torch_model"]()
    model.train()
    x = torch.randn(*case["input_shape"])
    if "classes" in case:
        target = torch.randint(0, case["classes"], (case["input_shape"][0],))
        target_list = [int(v) for v in target.tolist()]
    else:
        target = torch.rand(*case["mse_shape"])
        if "target_range" in case:
            lo, hi = case["target_range"]
            target = target * (hi - lo) + lo
        target_list = flat([target])
    params = list(model.parameters())
    out = {
        "name": case["name"],
        "model": case["dp_model"],
        "optimizer": case["optimizer"],
        "params": flat(params),
        "input_shape": case["input_shape"],
        "input": flat([x]),
        "target": target_list,
        "target_shape": list(target.shape),
    }
    opt = case["torch_opt"](params)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        y = model(x)
        loss = case["loss"](y, target)
        loss.backward()
        if step == 0:
            out["output"] = flat([y])
            out["grads"] = flat([p.grad for p in params])
        losses.append(float(loss.detach()))
        opt.step()
    out["losses"] = losses
    out["params_after"] = flat(params)
    out["buffers_after"] = flat([b for n, b in model.named_buffers() if not n.endswith("num_batches_tracked")])
    with open(os.path.join(HERE, case["name"] + ".json"), "w") as f:
        json.dump(out, f)
    print(case["name"], "loss", losses)
