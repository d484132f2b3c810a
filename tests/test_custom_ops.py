"""Operators called through torch.ops and custom operators (torch.library) compiled end to end:
one graph, the custom op as a named extern call (not an ATen fallback), autograd through its
registered backward; results and gradients equal eager's."""

from __future__ import annotations

import pytest
import torch
import torchkiln


@torch.library.custom_op("tke2e::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, s: float) -> torch.Tensor:
    return x * s + y


@scale_add.register_fake
def _scale_add_fake(x, y, s):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.s = inputs[2]


def _backward(ctx, grad):
    return grad * ctx.s, grad, None


scale_add.register_autograd(_backward, setup_context=_setup)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_custom_op_forward_and_backward(codegen):
    def f(a, b):
        return torch.ops.tke2e.scale_add(a.sin(), b, 2.0).cos() + scale_add(a, b, 3.0)

    compiled = torchkiln.compile(f, options={"strict": True, "codegen": codegen})
    a, b = torch.randn(33, requires_grad=True), torch.randn(33, requires_grad=True)
    out, ref = compiled(a, b), f(a, b)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), (a, b)), torch.autograd.grad(ref.sum(), (a, b))
    )
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.graph_breaks
    assert all(not g.fallbacks for g in report.graphs)
    assert "tke2e.scale_add" in [c for g in report.graphs for c in g.extern_calls]


def test_aten_namespace_calls_compile_in_one_graph():
    aten = torch.ops.aten

    def f(a, b):
        return aten.div(a, b, rounding_mode="trunc") + aten.mul.Tensor(a, b).relu()

    compiled = torchkiln.compile(f, options={"strict": True})
    a, b = torch.randn(16) * 5, torch.rand(16) + 0.5
    torch.testing.assert_close(compiled(a, b), f(a, b))
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.graph_breaks and report.graphs[0].kernels >= 1
