"""Outputs that are views of an intermediate the graph does not return (fuzz seeds 201320,
204252, 206815 fell back to eager: "graph outputs are views of an intermediate that is not itself
an output"). The graph now returns the intermediate as a hidden output and the views are rebuilt
from it (aot-partition view_bases.py), as torch.compile's AOTAutograd does.

Each case runs eagerly and compiled (static and dynamic shapes, two sizes) on fresh inputs and
compares: values, which outputs are views and of a base of which shape, which outputs share a
storage, a write through an output afterwards (seen through the others as in eager, or eager's
error), and gradients through the views; none may fall back to eager.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import torchkiln


def overlapping_slices(x):
    t = x * 2
    return t[1:], t[:-1]


def select_before_an_inplace_write(x):
    """Seed 201320's shape: a view taken before its base is written in place."""
    t = x.exp()
    a = t[0].unsqueeze(0)
    t.neg_()
    return a.unsqueeze(-2), t[1:]


def transposed_and_strided(x):
    t = x.unsqueeze(0) * x.unsqueeze(1)
    return t.t()[1:], t[::2], x.sum()


def views_beside_a_mutated_input(x):
    x.add_(1)
    t = x.sin()
    return t[::2], t[1::2]


def views_of_two_intermediates(x):
    t = x + 1
    u = x.cos()
    return u[1:], t[:2], u[:1], t[3:]


def slices_across_a_break(x):
    t0 = x * 2
    a, b = t0[1:], t0[:2]
    print("a graph break: a and b leave the first graph")
    a.add_(1)
    return b


CASES = [
    overlapping_slices,
    select_before_an_inplace_write,
    transposed_and_strided,
    views_beside_a_mutated_input,
    views_of_two_intermediates,
    slices_across_a_break,
]


def _leaves(result):
    return [t for t in torch.utils._pytree.tree_leaves(result) if isinstance(t, torch.Tensor)]


def _call(f, x):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return f(x), None
        except Exception as e:  # noqa: BLE001 - compared against eager
            return None, e


def _same_aliasing(got, want):
    for g, w in zip(got, want):
        assert g._is_view() == w._is_view()
        if w._is_view():
            assert g._base.shape == w._base.shape
    for i in range(len(want)):
        for j in range(len(want)):
            shares = want[i].untyped_storage().data_ptr() == want[j].untyped_storage().data_ptr()
            assert (
                got[i].untyped_storage().data_ptr() == got[j].untyped_storage().data_ptr()
            ) == shares


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", CASES)
def test_views_of_an_unreturned_intermediate(fn, dynamic, private_cache_dir):
    compiled = torchkiln.compile(fn, dynamic=dynamic)
    for n in (5, 7):
        x = torch.randn(n)
        x_e, x_c = x.clone(), x.clone()
        (want, want_err), (got, got_err) = _call(fn, x_e), _call(compiled, x_c)
        assert want_err is None and got_err is None, (want_err, got_err)
        want, got = _leaves(want), _leaves(got)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        torch.testing.assert_close(x_c, x_e)
        _same_aliasing(got, want)
        # a write through the first output afterwards reaches the others as in eager
        (_, want_err), (_, got_err) = (
            _call(lambda t: t.mul_(3), want[0]),
            _call(lambda t: t.mul_(3), got[0]),
        )
        assert type(got_err) is type(want_err), (want_err, got_err)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
    # after a break the second graph's inputs are the views, mutated: compiled under dynamic
    # shapes too (capture keeps the sizes of arguments that share a storage static)
    fallbacks = torchkiln.report(compiled).eager_fallbacks
    assert not fallbacks, [f.reason for f in fallbacks]


@pytest.mark.parametrize("write_first", [False, True])
@pytest.mark.parametrize(
    "fn", [overlapping_slices, transposed_and_strided, views_of_two_intermediates]
)
def test_gradients_through_rebuilt_views(fn, write_first, private_cache_dir):
    """Gradients flow through the rebuilt views into the hidden output, also after an in-place
    write on one of them (autograd's CopySlices on the hidden base, as on eager's base)."""
    compiled = torchkiln.compile(fn)
    x = torch.randn(6)
    grads = []
    outs = []
    for f in (fn, compiled):
        xi = x.clone().requires_grad_()
        result = _leaves(f(xi))
        if write_first:
            result[0].mul_(torch.linspace(-1, 2, result[0].numel()).reshape(result[0].shape))
        torch.manual_seed(1)
        loss = sum((r * torch.randn(r.shape)).sum() for r in result if r.requires_grad)
        loss.backward()
        grads.append(xi.grad)
        outs.append([r.detach() for r in result])
    for g, w in zip(outs[1], outs[0]):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(grads[1], grads[0])
    assert not torchkiln.report(compiled).eager_fallbacks


def _lone_view_written_after_a_break(x, mean, var):
    """Fuzz seed 21089: an output that is a view of an intermediate no other output shares,
    written in place in the next graph. The compiled graph handed it out as a view of its own
    buffer, and autograd refuses in-place writes to the views a Function of several outputs
    returns; eager's tensor is a view of an intermediate nothing else holds."""
    t0 = torch.nn.functional.batch_norm(x, mean, var.abs() + 0.5, training=False)
    t1 = torch.where(t0 > 0, t0, x)
    t2 = t0.unsqueeze(1)
    print(end="")  # graph break
    t2.neg_()
    return t2, t1


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_lone_view_output_written_in_place_after_a_break(dynamic, private_cache_dir):
    compiled = torchkiln.compile(
        _lone_view_written_after_a_break, dynamic=dynamic, options={"strict": True}
    )
    for shape in [(3, 3, 5), (2, 3, 4)]:
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        mean, var = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
        x_ref = x.detach().clone().requires_grad_()
        with contextlib.redirect_stdout(io.StringIO()):
            got = compiled(x, mean, var)
            expected = _lone_view_written_after_a_break(x_ref, mean, var)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        sum(t.square().sum() for t in got).backward()
        sum(t.square().sum() for t in expected).backward()
        torch.testing.assert_close(x.grad, x_ref.grad)


def _saved_output_written_after_a_break(x, m):
    y = torch.log_softmax(x, 1)  # log_softmax saves its output for the backward
    z = y.reshape(-1, x.shape[1])
    z.add_(y)  # an in-place write of a view: a graph break, then eager's add_ bumps y's version
    return x @ x.t(), ~m


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_saved_output_written_in_place_that_the_loss_never_reaches(dynamic, private_cache_dir):
    """A graph output saved for the backward (log_softmax's), written in place after a graph
    break, on no path to the loss (fuzz seed 22526 of the mixed training shares). Autograd's
    engine still calls the graph's backward, with no gradient at all; it unpacked its saved
    values first, and the write's version bump raised "modified by an inplace operation".
    Eager's log_softmax node raises nothing there."""
    compiled = torchkiln.compile(
        _saved_output_written_after_a_break, dynamic=dynamic, options={"strict": True}
    )
    for rows in (2, 3):
        x = torch.randn(1, rows).t().requires_grad_()
        x_ref = x.detach().clone().requires_grad_()
        m = torch.rand(7, 3) > 0.5
        got = compiled(x, m)
        expected = _saved_output_written_after_a_break(x_ref, m)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
        got[0].sum().backward()
        expected[0].sum().backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
