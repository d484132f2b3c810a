"""A training step of conv-BN-ReLU blocks (ResNet's unit) under bfloat16 autocast and in float32,
through both code generators: output, every gradient and the running statistics against eager
on fresh random inputs. The backward's ReLU-masked gradient is recomputed in each of its
consumers (loop-ir's inline_cost.py), not stored in float32 and read back."""

from __future__ import annotations

import contextlib
import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln
from torch import nn


class ConvBnRelu2(nn.Module):
    def __init__(self, c: int = 6) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)))


@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
def test_conv_bn_relu_training_step_matches_eager(codegen, autocast):
    torch.manual_seed(0)
    model = ConvBnRelu2().train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True, "codegen": codegen})
    tol = {"atol": 3e-2, "rtol": 3e-2} if autocast else {"atol": 1e-4, "rtol": 1e-4}

    def ctx():
        if autocast:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    for _ in range(2):  # fresh inputs each step
        x = torch.randn(2, 3, 9, 11)
        with ctx():
            out, expected = compiled(x), ref(x)
        torch.testing.assert_close(out.float(), expected.float(), **tol)
        out.float().square().mean().backward()
        expected.float().square().mean().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        # gradients scaled to their own size: bfloat16 rounding differs where the order does
        scale = q.grad.abs().max().clamp_min(1e-6)
        torch.testing.assert_close(p.grad / scale, q.grad / scale, msg=name, **tol)
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, msg=name, **tol)
