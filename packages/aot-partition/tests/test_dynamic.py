"""Symbolic shapes: graphs whose example values have symbolic sizes stay symbolic and run any size."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from torchkiln_aot_partition import aot_compile


def _with_dynamic_batch(gm, inputs, dynamic=None):
    """Give the placeholders capture-style example_value FakeTensors with a symbolic dim 0."""
    mode = FakeTensorMode(shape_env=ShapeEnv())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dynamic = dynamic or [True] * len(inputs)
    for node, x, dyn in zip(placeholders, inputs, dynamic):
        first = DimDynamic.DYNAMIC if dyn else DimDynamic.STATIC
        dims = [first] + [DimDynamic.STATIC] * (x.dim() - 1)
        node.meta["example_value"] = mode.from_tensor(
            x, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims)
        )
    return gm


def _fn(x, y):
    y.mul_(2)
    return ((x.sin() * y).sum(0), x.reshape(-1).exp())


def test_symbolic_inference_runs_other_sizes(compiler, capture):
    x, y = torch.randn(6, 4), torch.randn(6, 4)
    gm = _with_dynamic_batch(capture(_fn), [x, y])
    with torch.no_grad():
        compiled = aot_compile(gm, [x, y.clone()], fw_compiler=compiler)
    vals = [n.meta["val"] for n in compiler.graphs[0].graph.nodes if n.op == "placeholder"]
    assert not isinstance(vals[0].shape[0], int)
    for n in (3, 11):
        x1, y1 = torch.randn(n, 4), torch.randn(n, 4)
        y2 = y1.clone()
        for got, want in zip(compiled(x1, y1), _fn(x1, y2)):
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(y1, y2)


def _mlp(x, w):
    return (torch.tanh(x @ w).sum(1),)


def test_symbolic_training_gradients(compiler, capture):
    x, w = torch.randn(5, 4, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    gm = _with_dynamic_batch(capture(_mlp), [x, w], dynamic=[True, False])
    compiled = aot_compile(gm, [x, w], fw_compiler=compiler)
    for n in (2, 9):
        x1 = torch.randn(n, 4, requires_grad=True)
        w1 = w.detach().clone().requires_grad_(True)
        x2, w2 = (t.detach().clone().requires_grad_(True) for t in (x1, w1))
        got, want = compiled(x1, w1)[0], _mlp(x2, w2)[0]
        torch.testing.assert_close(got, want)
        g = torch.randn(n)
        got.backward(g)
        want.backward(g)
        torch.testing.assert_close(x1.grad, x2.grad)
        torch.testing.assert_close(w1.grad, w2.grad)
