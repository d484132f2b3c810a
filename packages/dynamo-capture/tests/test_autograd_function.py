"""``torch.autograd.Function.apply`` under capture (``variables/autograd_function.py``).

Where no gradient is recorded (grad mode off, or no tensor argument requiring grad), forward is
inlined: one graph, eager's values, ctx calls doing nothing. Where a gradient may flow, apply
runs in Python between two graphs: values and gradients (the user's backward, not autograd's
of forward) equal eager's. The choice is guarded: the same compiled function switches when an
input starts to require grad. Before, the second case raised a TypeError from the step that ran
``super().apply``: capture had left ``_FunctionBase.apply``, a C-level classmethod reached
through super(), unbound.
"""

from __future__ import annotations

import torch
from torchkiln_dynamo_capture import capture


class Counting:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


class TanhGate(torch.autograd.Function):
    """Old style (ctx first). Its backward is deliberately not forward's derivative: a
    straight-through gradient, so a compiler that differentiated forward instead would be seen."""

    @staticmethod
    def forward(ctx, x, scale=2.0):
        ctx.save_for_backward(x)
        ctx.scale = scale
        ctx.mark_non_differentiable()
        return x * torch.tanh(x) * scale

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.scale + x * 0, None


class Clamp(torch.autograd.Function):
    """New style: forward without ctx, setup_context after it; two outputs."""

    @staticmethod
    def forward(x, low):
        return x.clamp(min=low), (x < low).sum()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.low = inputs[1]
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, grad_count):
        return grad, None


def _gate(x, y):
    return TanhGate.apply(x + 1, 3.0) * y


def _clamp(x):
    out, count = Clamp.apply(x * 2, -0.5)
    return out.sum(-1) + count


def test_forward_is_inlined_where_nothing_is_recorded():
    for fn, inputs in (
        (_gate, (torch.randn(4, 5), torch.randn(5))),
        (_clamp, (torch.randn(3, 6),)),
    ):
        backend = Counting()
        captured = capture(fn, backend)
        with torch.no_grad():
            for _ in range(2):
                fresh = [torch.randn_like(t) for t in inputs]
                torch.testing.assert_close(captured(*fresh), fn(*fresh))
        assert backend.graphs == 1, fn.__name__
        # grad mode on, but nothing requires grad: still nothing recorded, still inlined
        fresh = [torch.randn_like(t) for t in inputs]
        out = captured(*fresh)
        torch.testing.assert_close(out, fn(*fresh))
        assert not out.requires_grad


def test_where_a_gradient_flows_the_users_backward_runs():
    backend = Counting()
    captured = capture(_gate, backend)
    x, y = torch.randn(4, 5), torch.randn(5)
    with torch.no_grad():
        captured(x, y)  # the inlined form first: requires_grad then changes the choice
    xs = x.clone().requires_grad_(True)
    out = captured(xs, y)
    out.sum().backward()
    xe = x.clone().requires_grad_(True)
    expected = _gate(xe, y)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(xs.grad, xe.grad)  # the straight-through gradient, 3 * y
    torch.testing.assert_close(xs.grad, (3.0 * y).expand(4, 5))
