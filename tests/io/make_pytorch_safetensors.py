#!/usr/bin/env python3
"""Writes the PyTorch reference for tests/io/test_io.cpp:

  pytorch_linear.safetensors  safetensors.torch.save_file(model.state_dict())
                              of nn.Sequential(Linear(3, 4), BatchNorm1d(4),
                              ReLU(), Linear(4, 2)) with fixed weights and
                              running statistics (num_batches_tracked
                              included, as int64, as PyTorch writes it)
  pytorch_linear.json         a fixed input and the model's output for it in
                              eval mode

Run with PyTorch and safetensors installed:
    python3 tests/io/make_pytorch_safetensors.py
"""
import json
import os

import torch
from torch import nn
from safetensors.torch import save_file

here = os.path.dirname(os.path.abspath(__file__))

model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
with torch.no_grad():
    # Fixed, readable values (no RNG): the test must not depend on torch's.
    model[0].weight.copy_(torch.tensor([[0.5, -0.25, 0.125], [-0.75, 0.5, 0.25],
                                        [0.3, 0.2, -0.1], [0.05, -0.6, 0.4]]))
    model[0].bias.copy_(torch.tensor([0.1, -0.2, 0.3, -0.4]))
    model[1].weight.copy_(torch.tensor([1.5, 0.5, -1.0, 2.0]))
    model[1].bias.copy_(torch.tensor([0.25, -0.5, 0.0, 0.75]))
    model[1].running_mean.copy_(torch.tensor([0.1, -0.3, 0.2, 0.05]))
    model[1].running_var.copy_(torch.tensor([1.2, 0.8, 2.5, 0.6]))
    model[1].num_batches_tracked.fill_(7)
    model[3].weight.copy_(torch.tensor([[0.9, -0.4, 0.3, 0.2], [-0.1, 0.8, -0.7, 0.6]]))
    model[3].bias.copy_(torch.tensor([0.05, -0.15]))
model.eval()

x = torch.tensor([[1.0, 2.0, -1.0], [0.5, -0.5, 0.25], [-2.0, 0.0, 3.0]])
with torch.no_grad():
    y = model(x)

save_file(model.state_dict(), os.path.join(here, "pytorch_linear.safetensors"))
with open(os.path.join(here, "pytorch_linear.json"), "w") as f:
    json.dump({
        "generator": f"torch {torch.__version__}, safetensors.torch.save_file",
        "model": {"input": {"shape": [3]},
                  "layers": [{"type": "linear", "out_features": 4}, {"type": "batch_norm1d"},
                             {"type": "relu"}, {"type": "linear", "out_features": 2}]},
        "input_shape": list(x.shape),
        "input": x.flatten().tolist(),
        "output": y.flatten().tolist(),
        "state_dict": {k: {"shape": list(v.shape), "dtype": str(v.dtype), "values": v.flatten().tolist()}
                       for k, v in model.state_dict().items()},
    }, f, indent=1)
    f.write("\n")
print("wrote pytorch_linear.safetensors and pytorch_linear.json")
