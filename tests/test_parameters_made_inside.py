"""Parameters made and initialised inside a compiled function (``w = nn.Parameter(torch.empty(4,
4)); nn.init.normal_(w)``), parameters passed in, and backward passes inside one: results, the
returned parameter (its type and values), gradients and ``.grad`` equal eager's under the same
``torch.manual_seed``, on fresh inputs over several calls, with no eager fallback (strict).

Before: a parameter made inside was a graph value (no leaf: ``.grad`` of it stayed None, it came
back as a plain tensor, and without grad the trace leaked a FakeTensor into the graph); a parameter
reached through an argument was a constant bound to the first call's object (a different one
passed later was ignored); ``nn.init.*_`` on a parameter input (a write under no_grad to a leaf
that requires grad, which autograd allows) fell back to eager; ``Tensor.backward()`` inside a
compiled function was dropped as dead code; a module made inside for capture to look at drew its
initial weights from the generator once more than eager on the first call.
"""

from __future__ import annotations

import pytest
import torch
import torchkiln
from torch import nn

INITS = {
    "normal_": nn.init.normal_,
    "uniform_": nn.init.uniform_,
    "kaiming_uniform_": lambda w: nn.init.kaiming_uniform_(w, a=5**0.5),
    "xavier_normal_": nn.init.xavier_normal_,
    "orthogonal_": nn.init.orthogonal_,
    "ones_": nn.init.ones_,
    "zeros_": nn.init.zeros_,
    "constant_": lambda w: nn.init.constant_(w, 0.3),
    "eye_": nn.init.eye_,
}


def _made_inside(init):
    def f(x):
        w = nn.Parameter(torch.empty(4, 4))
        init(w)
        return x @ w, w

    return f


def _same(got, want):
    assert type(got) is type(want)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("grad", [True, False], ids=["x-requires-grad", "x-no-grad"])
@pytest.mark.parametrize("name", sorted(INITS))
def test_init_of_a_parameter_made_inside(name, grad):
    f = _made_inside(INITS[name])
    compiled = torchkiln.compile(f, options={"strict": True})
    for seed in (0, 7, 7):  # the same seed twice: the same weights as eager's, call after call
        x = torch.randn(3, 4, requires_grad=grad)
        torch.manual_seed(seed)
        want_out, want_w = f(x)
        torch.manual_seed(seed)
        got_out, got_w = compiled(x)
        _same(got_out, want_out)
        _same(got_w, want_w)  # an nn.Parameter, a leaf
        assert got_w.is_leaf and got_w.requires_grad
        g = torch.randn_like(want_out)
        if grad:
            want_gx = torch.autograd.grad(want_out, x, g, retain_graph=True)[0]
        want_out.backward(g)
        got_x_grad = None
        if grad:
            got_x_grad = torch.autograd.grad(got_out, x, g, retain_graph=True)[0]
            torch.testing.assert_close(got_x_grad, want_gx)
        got_out.backward(g)
        torch.testing.assert_close(got_w.grad, want_w.grad)  # the gradient reaches this call's leaf
    assert not torchkiln.report(compiled).eager_fallbacks


def init_a_parameter_passed_in(w, x):
    nn.init.normal_(w, std=0.5)
    return torch.tanh(x @ w)


def test_init_of_a_parameter_passed_in():
    """The write under no_grad to a leaf that requires grad is compiled (no fallback); the
    gradient reaches the parameter through its new value, as in eager."""
    compiled = torchkiln.compile(init_a_parameter_passed_in, options={"strict": True})
    for seed in (1, 2):
        x = torch.randn(5, 4)
        w_e, w_c = nn.Parameter(torch.randn(4, 4)), nn.Parameter(torch.randn(4, 4))
        torch.manual_seed(seed)
        want = init_a_parameter_passed_in(w_e, x)
        torch.manual_seed(seed)
        got = compiled(w_c, x)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(w_c, w_e)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(w_c.grad, w_e.grad)
    assert not torchkiln.report(compiled).eager_fallbacks


def matmul_by(w, x):
    return x @ w


def test_a_different_parameter_passed_in_is_used():
    compiled = torchkiln.compile(matmul_by, options={"strict": True})
    x = torch.randn(3, 4)
    for _ in range(3):
        w = nn.Parameter(torch.randn(4, 4))
        torch.testing.assert_close(compiled(w, x), x @ w)


def backward_inside(x):
    w = nn.Parameter(torch.empty(4, 4))
    nn.init.normal_(w)
    (x @ w).sum().backward()
    return w.grad, w


def autograd_backward_inside(x):
    torch.autograd.backward((x * 3).sin().sum())
    return x + 1


def test_backward_inside_fills_grad():
    compiled = torchkiln.compile(backward_inside, options={"strict": True})
    for seed in (0, 1, 2):
        x = torch.randn(3, 4, requires_grad=True)
        torch.manual_seed(seed)
        want_gw, want_w = backward_inside(x)
        want_gx, x.grad = x.grad, None
        torch.manual_seed(seed)
        got_gw, got_w = compiled(x)
        torch.testing.assert_close(got_gw, want_gw)
        torch.testing.assert_close(got_w, want_w)
        torch.testing.assert_close(x.grad, want_gx)
    compiled = torchkiln.compile(autograd_backward_inside, options={"strict": True})
    for _ in range(2):
        x = torch.randn(6, requires_grad=True)
        y = x.detach().clone().requires_grad_(True)
        torch.testing.assert_close(compiled(x), autograd_backward_inside(y))
        torch.testing.assert_close(x.grad, y.grad)


def linear_made_inside(x):
    return nn.Linear(4, 3)(x)


def test_a_module_made_inside_draws_its_weights_as_eager_does():
    """Capture makes the module once to look at it; that must not draw from the generator, or
    the first call's weights differ from eager's under the same seed."""
    compiled = torchkiln.compile(linear_made_inside)
    for seed in (3, 3, 4):
        x = torch.randn(2, 4)
        torch.manual_seed(seed)
        want = linear_made_inside(x)
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = compiled(x)
        torch.testing.assert_close(got, want)
        assert torch.equal(torch.get_rng_state(), state)
