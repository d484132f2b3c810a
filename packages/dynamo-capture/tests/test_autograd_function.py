"""``torch.autograd.Function.apply`` under capture (``variables/autograd_function.py``).

Where no gradient is recorded (grad mode off, or no tensor argument requiring grad), forward is
inlined: one graph, eager's values, ctx calls doing nothing. Where a gradient may flow, apply is
one node of the graph, whose run records the user's backward: values and gradients (the user's
backward, not autograd's of forward) equal eager's; a global number the backward reads is guarded.
Where capture cannot vouch for the node (a backward reading a mutable global, a forward with
outside effects or marking an input dirty), apply runs in Python between two graphs, as eager. The choice is guarded: the same compiled function switches when an
input starts to require grad. Before, the second case raised a TypeError from the step that ran
``super().apply``: capture had left ``_FunctionBase.apply``, a C-level classmethod reached
through super(), unbound.
"""

from __future__ import annotations

import torch
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.testing import RecordingBackend


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
        backend = RecordingBackend()
        captured = capture(fn, backend)
        with torch.no_grad():
            for _ in range(2):
                fresh = [torch.randn_like(t) for t in inputs]
                torch.testing.assert_close(captured(*fresh), fn(*fresh))
        assert backend.calls == 1, fn.__name__
        # grad mode on, but nothing requires grad: still nothing recorded, still inlined
        fresh = [torch.randn_like(t) for t in inputs]
        out = captured(*fresh)
        torch.testing.assert_close(out, fn(*fresh))
        assert not out.requires_grad


def test_where_a_gradient_flows_the_users_backward_runs():
    backend = RecordingBackend()
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


def _grads_equal_eager(fn, inputs, grad_at):
    """Two calls on fresh inputs: outputs and the gradients of the inputs at ``grad_at`` equal
    eager's; returns the capture backend."""
    backend = RecordingBackend()
    captured = capture(fn, backend)
    for _ in range(2):
        fresh = [torch.randn_like(t) for t in inputs]
        ours = [t.clone().requires_grad_(i in grad_at) for i, t in enumerate(fresh)]
        theirs = [t.clone().requires_grad_(i in grad_at) for i, t in enumerate(fresh)]
        out, expected = captured(*ours), fn(*theirs)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        for i in grad_at:
            torch.testing.assert_close(ours[i].grad, theirs[i].grad)
    return backend


def test_where_a_gradient_flows_apply_is_one_node_of_the_graph():
    """Old and new style, the straight-through backward, two outputs: one graph each, whose
    apply node records the user's backward."""
    for fn, inputs, grad_at in (
        (_gate, (torch.randn(4, 5), torch.randn(5)), (0, 1)),
        (_clamp, (torch.randn(3, 6),), (0,)),
    ):
        backend = _grads_equal_eager(fn, inputs, grad_at)
        assert backend.calls == 1, fn.__name__
        assert "autograd_function_" in backend.code[0], backend.code[0]


SCALE = 2.0  # rebound by a test: a backward reading it is guarded on its value
SEEN: list = []


class GlobalScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return grad * SCALE


FACTORS = [4.0]


class GlobalList(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0

    @staticmethod
    def backward(ctx, grad):
        return grad * FACTORS[0]


class Logged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        SEEN.append(1)  # an effect outside forward: eager does it once a call
        return x + 1

    @staticmethod
    def backward(ctx, grad):
        return grad


class Doubled(torch.autograd.Function):
    """In place: forward writes its input and marks it dirty."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Frozen(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.exp() + torch.ones_like(x)


def test_a_backward_reading_a_global_number_is_one_node_guarded_on_it():
    """The joint trace bakes the number into the backward graph: capture guards its value, so
    rebinding it compiles again (a graph each, both with the node)."""
    global SCALE
    backend = RecordingBackend()
    captured = capture(lambda x: GlobalScale.apply(x * 3) + 1, backend)
    try:
        for scale in (2.0, 5.0, 2.0):
            SCALE = scale
            x = torch.randn(4, requires_grad=True)
            captured(x).sum().backward()
            torch.testing.assert_close(x.grad, torch.full((4,), 3 * scale))
    finally:
        SCALE = 2.0
    assert backend.calls == 2 and all("autograd_function_" in code for code in backend.code)


def test_a_backward_reading_a_global_list_runs_in_python():
    """A mutable global (a list, read by the backward) could change unseen by a guard on its
    identity: apply runs in Python between two graphs."""
    backend = RecordingBackend()
    captured = capture(lambda x: GlobalList.apply(x * 3) + 1, backend)
    x = torch.randn(4, requires_grad=True)
    captured(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 3.0 * FACTORS[0]))
    assert not any("autograd_function_" in code for code in backend.code)


def test_forward_with_an_outside_effect_or_a_dirty_input_runs_in_python():
    backend = RecordingBackend()
    captured = capture(lambda x: Logged.apply(x * 3) * 2, backend)
    x = torch.randn(4, requires_grad=True)
    SEEN.clear()
    captured(x).sum().backward()
    captured(x).sum().backward()
    assert SEEN == [1, 1] and not any("autograd_function_" in c for c in backend.code)
    torch.testing.assert_close(x.grad, torch.full((4,), 12.0))

    backend = RecordingBackend()
    captured = capture(lambda x: Doubled.apply(x * 3) + 1, backend)
    x = torch.randn(4, requires_grad=True)
    out = captured(x)
    torch.testing.assert_close(out, x.detach() * 6 + 1)
    out.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 6.0))
    assert not any("autograd_function_" in c for c in backend.code)


def test_a_once_differentiable_backward_is_one_graph():
    backend = _grads_equal_eager(lambda x: Frozen.apply(x.sin()) * 2, (torch.randn(5),), (0,))
    assert backend.calls == 1
