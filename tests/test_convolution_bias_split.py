"""On GPUs a convolution's bias is added in the pointwise code after the convolution (ATen adds
it in a kernel of its own after cuDNN's): the extern call runs without bias and the add fuses
with the epilogue. The GPU path is exercised here by lowering convolutions as for a non-CPU
device; results must equal eager's (float32: exactly the same sum)."""

from __future__ import annotations

import re

import pytest
import torch
import torchkiln
import torchkiln_loop_ir.graph as graph

_NO_ONEDNN = {"mkldnn_convolution": False}  # the CPU's oneDNN pass would take the convolutions


@pytest.fixture
def gpu_like_convolutions(monkeypatch):
    device = graph.LoweringContext.device

    def lowered_device(self):
        if self.node.target is torch.ops.aten.convolution.default:
            return torch.device("meta")  # not "cpu": the GPU lowering
        return device.fget(self)

    monkeypatch.setattr(graph.LoweringContext, "device", property(lowered_device))


def test_bias_is_added_in_the_fused_epilogue(gpu_like_convolutions):
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1), torch.nn.Sigmoid()
    ).eval()
    x = torch.randn(2, 3, 10, 10)
    compiled = torchkiln.compile(
        m,
        options={
            "strict": True,
            "graph_cache": False,
            "freeze_parameters": False,
            "loop_ir": _NO_ONEDNN,
        },
    )
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), rtol=1e-6, atol=1e-6)
    (g,) = torchkiln.report(compiled).graphs
    assert g.extern_calls.count("aten.convolution") == 2 and not g.fallbacks
    assert g.kernels == 2  # bias + relu, bias + sigmoid: one kernel each, no bias kernel
    wrapper = open(g.artifacts["forward.wrapper"]).read()
    calls = re.findall(r"extern\d+\(([^)]*)\)  # extern aten.convolution", wrapper)
    assert len(calls) == 2 and all(len(c.split(", ")) == 2 for c in calls), calls  # input, weight


def test_training_through_a_split_bias_matches_eager(gpu_like_convolutions):
    m = torch.nn.Sequential(torch.nn.Conv1d(4, 6, 3, padding=1), torch.nn.GELU())
    x = torch.randn(3, 4, 9, requires_grad=True)
    compiled = torchkiln.compile(
        m, options={"strict": True, "graph_cache": False, "loop_ir": _NO_ONEDNN}
    )
    out = compiled(x)
    want = m(x)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    (g,) = torch.autograd.grad(out.square().sum(), [m[0].bias])
    (w,) = torch.autograd.grad(want.square().sum(), [m[0].bias])
    torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
