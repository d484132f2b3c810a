"""Batch-norm training with loop-ir's device-filling split of the statistics and the backward's
sums (lowering/split_reductions.py), end to end: torchkiln.compile of a BN-ReLU training step on
channels-last and NCHW inputs through the Triton code generator (its interpreter) with a GPU-sized
split target, against eager (output, gradients, running statistics) on fresh random inputs; and
the C++ code generator, which gets no split target (its statistics stay one pass) and still
compiles and runs the split form when a test asks for it."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln
import torchkiln_loop_ir as L
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_cpp import CppBackend
from torchkiln_loop_ir.lowering import reductions

SHAPE = (8, 32, 32, 32)


class BnRelu(nn.Module):
    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.bn(x))


@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_bn_training_step_with_split_statistics_matches_eager(channels_last, monkeypatch):
    splits = []
    for name in ("split_welford", "split_reduction"):
        original = getattr(reductions, name)

        def record(ctx, red, split, original=original):
            splits.append((red.reduction_type, split))
            return original(ctx, red, split)

        monkeypatch.setattr(reductions, name, record)
    torch.manual_seed(0)
    model = BnRelu().train()
    ref = copy.deepcopy(model)
    options = {"strict": True, "codegen": "triton", "loop_ir": {"split_programs": 256}}
    compiled = torchkiln.compile(model, options=options)
    for _ in range(2):  # fresh inputs each step
        x = torch.randn(SHAPE) * 3 + 1
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = compiled(xa), ref(xb)
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
        g = torch.randn_like(expected)
        out.backward(g)
        expected.backward(g)
        torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=1e-4)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=2e-3, rtol=1e-4, msg=name)
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, atol=1e-4, rtol=1e-4, msg=name)
    # the forward's statistics and the backward's two sums were split (channels-last further:
    # 32 channels are one program of a column reduction)
    split = 64 if channels_last else 2
    assert sorted(splits) == [("sum", split), ("sum", split), ("welford_reduce", split)], splits


def _stats(x):
    return torch.var_mean(x, (0, 2, 3), correction=0)


@pytest.mark.usefixtures("private_cache_dir")
@pytest.mark.parametrize("split_programs", [None, 256], ids=["default", "forced"])
def test_cpp_statistics_unsplit_by_default_and_correct_when_split(split_programs):
    x = (torch.randn(16, 64, 32, 32) * 2 + 3).to(memory_format=torch.channels_last)
    gm = make_fx(_stats, decomposition_table=L.decompositions())(x)
    options = L.LoopIROptions(split_programs=split_programs)
    cg = L.compile_graph(gm, [x], CppBackend(), options)
    for got, expected in zip(cg(x), _stats(x)):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-5)
    split = "welford_combine" in cg.schedule_text()
    assert split == (split_programs is not None)
