"""Control-flow operators (torch.cond, while_loop, map) compiled end to end: one graph, the
operator as an extern call of loop-ir (its subgraphs run eagerly), the code around it fused as
usual; results and gradients equal eager's, on inputs taking each branch, without recompiling."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchkiln
from torch._higher_order_ops.map import map as hmap
from torch._higher_order_ops.while_loop import while_loop


def _cond_fn(x, y):
    h = x * 2 + y

    def t(a, b):
        return a.sin() * b

    def f(a, b):
        return a.cos() - b

    return torch.cond(h.sum() > 0, t, f, (h, y)).relu() + 1


def _one_graph(compiled, extern: str) -> None:
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.graph_breaks and not report.eager_fallbacks
    assert extern in report.graphs[0].extern_calls
    assert not report.graphs[0].fallbacks


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_cond_both_branches_one_graph(codegen):
    compiled = torchkiln.compile(_cond_fn, options={"strict": True, "codegen": codegen})
    for sign in (1.0, -1.0, 1.0, -1.0):
        x, y = torch.randn(8, 5).abs() * sign, torch.randn(8, 5) * 0.1
        torch.testing.assert_close(compiled(x, y), _cond_fn(x, y))
    _one_graph(compiled, "cond")


def test_cond_autograd():
    compiled = torchkiln.compile(_cond_fn, options={"strict": True})
    for sign in (1.0, -1.0):
        x = (torch.randn(6, 4).abs() * sign).requires_grad_()
        y = (torch.randn(6, 4) * 0.1).requires_grad_()
        out, ref = compiled(x, y), _cond_fn(x, y)
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(
            torch.autograd.grad(out.sum(), (x, y)), torch.autograd.grad(ref.sum(), (x, y))
        )
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.eager_fallbacks


class _Gate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(4, 4)
        self.down = torch.nn.Linear(4, 4)

    def forward(self, x):
        def inner(a):
            return torch.cond(a.mean() > 0.2, self.up, lambda b: self.down(b) * 2, (a,))

        return torch.cond(x.sum() > 0, inner, lambda a: a.tanh(), (x,)) + x


def test_nested_cond_module_parameters_get_gradients():
    torch.manual_seed(0)
    model = _Gate()
    compiled = torchkiln.compile(model, options={"strict": True})
    for scale in (1.0, -1.0, 0.01):
        x = torch.randn(3, 4).abs() * scale
        out, ref = compiled(x), model(x)
        torch.testing.assert_close(out, ref)
        params = list(model.parameters())
        got = torch.autograd.grad(out.square().sum(), params, allow_unused=True)
        want = torch.autograd.grad(ref.square().sum(), params, allow_unused=True)
        for g, w in zip(got, want):
            if w is None:
                assert g is None or torch.count_nonzero(g) == 0
            else:
                torch.testing.assert_close(g, w)
    assert len(torchkiln.report(compiled).graphs) == 1


def test_cond_dynamic_shapes_no_recompile():
    compiled = torchkiln.compile(_cond_fn, dynamic=True, options={"strict": True})
    for n in (3, 7, 12):
        for sign in (1.0, -1.0):
            x, y = torch.randn(n, 5).abs() * sign, torch.randn(n, 5) * 0.1
            torch.testing.assert_close(compiled(x, y), _cond_fn(x, y))
    assert len(torchkiln.report(compiled).graphs) == 1


def _cond_sized_fn(x):
    # the branches differ in size: the result's first dim is unbacked (known at run time)
    y = torch.cond(x.sum() > 0, lambda a: a[1:] * 2, lambda a: a.cos(), (x,))
    return y.relu().sum(0) * y.shape[0]


@pytest.mark.parametrize("dynamic", [None, True])
def test_cond_branches_of_different_sizes(dynamic):
    """One graph per shape specialisation as torch.compile gives, never a break: a static capture
    retries with a ShapeEnv for the unbacked size; under dynamic shapes the unbacked symbol is
    bound to the cond node so aot-partition's trace over the same ShapeEnv accepts it."""
    compiled = torchkiln.compile(_cond_sized_fn, dynamic=dynamic, options={"strict": True})
    for n in (4, 6, 9):
        for sign in (1.0, -1.0):
            x = torch.randn(n, 5).abs() * sign
            torch.testing.assert_close(compiled(x), _cond_sized_fn(x))
    report = torchkiln.report(compiled)
    # dynamic=None: n=4 static, then n symbolic from n=6 on (automatic dynamic)
    assert (
        len(report.graphs) == (1 if dynamic else 2)
        and not report.graph_breaks
        and not report.eager_fallbacks
    )


def _while_fn(x):
    def cond_fn(i, a):
        return a.abs().sum() > 1.0

    def body_fn(i, a):
        return i + 1, a * 0.5

    i, a = while_loop(cond_fn, body_fn, (torch.tensor(0), x.exp()))
    return i * 10, a + 1


def test_while_loop_data_dependent_trip_count():
    compiled = torchkiln.compile(_while_fn, options={"strict": True})
    for scale in (0.1, 1.0, 3.0):
        x = torch.randn(5) * scale
        for got, want in zip(compiled(x), _while_fn(x)):
            torch.testing.assert_close(got, want)
    _one_graph(compiled, "while_loop")


def test_while_loop_backward_runs_eagerly_with_a_reason():
    def g(x, w):
        return while_loop(
            lambda i, a: i < 4, lambda i, a: (i + 1, (a * w).sin()), (torch.tensor(0), x)
        )[1]

    x, w = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    compiled = torchkiln.compile(g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.autograd.grad(compiled(x, w).sum(), (x, w))
    torch.testing.assert_close(got, torch.autograd.grad(g(x, w).sum(), (x, w)))
    (fallback,) = torchkiln.report(compiled).eager_fallbacks
    assert "autograd through while_loop" in fallback.reason
    assert any("while_loop" in str(c.message) for c in caught)


def _map_fn(xs, y):
    def body(x, y):
        return (x * y).sin() + x.sum()

    return hmap(body, xs, y) * 2


def test_map_forward_and_backward():
    compiled = torchkiln.compile(_map_fn, options={"strict": True})
    xs, y = torch.randn(5, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    out, ref = compiled(xs, y), _map_fn(xs, y)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), (xs, y)), torch.autograd.grad(ref.sum(), (xs, y))
    )
    with torch.no_grad():
        xs2, y2 = torch.randn(5, 4), torch.randn(4)
        torch.testing.assert_close(compiled(xs2, y2), _map_fn(xs2, y2))
    assert "map_impl" in torchkiln.report(compiled).graphs[0].extern_calls


def test_control_flow_graph_cache_hit():
    """A second compile of the same function loads the cached graph (operators pickled by name)."""
    for _ in range(2):
        compiled = torchkiln.compile(_while_fn, options={"strict": True})
        x = torch.randn(4)
        for got, want in zip(compiled(x), _while_fn(x)):
            torch.testing.assert_close(got, want)
    assert torchkiln.report(compiled).graphs[0].cache == "hit"
