"""Graph outputs that are views of other outputs or of inputs stay views after compiling (fuzz
seeds 21535, 22053: at a graph break, ``t3 = t0[0::2]`` was handed on as a tensor unrelated to
``t0``, so the in-place op after the break neither raised eager's overlap error nor wrote
through to ``t3``; ``t0[1:]`` read after ``t0.add_(1)`` gave the old values).

Every case runs eagerly and compiled (static and dynamic shapes) on fresh inputs: same values,
same aliasing (a write through one output is seen through the other), same exceptions.
"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
import torchkiln


def _both(fn, x, dynamic):
    compiled = torchkiln.compile(fn, dynamic=dynamic)
    results = []
    for f in (fn, compiled):
        xi = x.clone()
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                results.append((f(xi), None, xi))
            except Exception as e:  # noqa: BLE001 - compared against eager below
                results.append((None, e, xi))
    return results, torchkiln.report(compiled)


def read_after_write_across_a_break(x):
    t0 = x * 2
    t3 = t0[1:]
    print("a graph break: t0 and t3 leave the first graph")
    t0.add_(1)
    return t3


def view_returned_with_its_base(x):
    t0 = x * 2
    return t0, t0[1:].t() if t0.dim() > 1 else t0[1:]


def expanded_view_of_a_transposed_output(x):
    """Seed 70886: the base output has eager's transposed strides, the view is an expand."""
    t0 = x.t() * 2
    return t0.unsqueeze(0).expand(3, *t0.shape), t0


def view_of_a_transposed_intermediate_across_a_break(x):
    """Seed 81183: the compiled graph may give ``t1`` other strides than eager's (the input is
    transposed); the view is rebuilt over a copy of ``t1`` with eager's strides."""
    t1 = x.t().clamp(-0.5, 0.5)
    t3 = t1.transpose(1, 0)
    print("a graph break")
    t1.mul_(2)
    return t3 + 0


def views_of_an_empty_output(x):
    """Seeds 81079, 81264: outputs with no elements share nothing (their strides are arbitrary)."""
    t0 = x[:, :0] * 2
    return t0[:, 0::1], t0


def overlap_error_across_a_break(x):
    t0 = x.amax(dim=0, keepdim=True)
    t3 = t0[0::2]
    print("a graph break")
    t0.add_(t3)  # one element, other strides: eager refuses
    return t0 * 2


def view_of_an_input_across_a_break(x):
    t = x[1:]
    print("a graph break")
    x.mul_(3)
    return t + 0


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize(
    "fn",
    [
        read_after_write_across_a_break,
        view_returned_with_its_base,
        expanded_view_of_a_transposed_output,
        overlap_error_across_a_break,
        view_of_an_input_across_a_break,
        view_of_a_transposed_intermediate_across_a_break,
        views_of_an_empty_output,
    ],
)
def test_aliases_survive_the_graph(fn, dynamic):
    for n in (5, 7):  # a second size: dynamic shapes find the views' geometry again
        ((want, want_err, x_e), (got, got_err, x_c)), report = _both(fn, torch.randn(n, 3), dynamic)
        # the graph after a break takes the aliases and mutates them: under dynamic shapes too
        # it is compiled (the aliased arguments' sizes stay static), nothing falls back
        assert not report.eager_fallbacks, [f.reason for f in report.eager_fallbacks]
        if want_err is not None:
            assert type(got_err) is type(want_err) and str(got_err) == str(want_err), (
                want_err,
                got_err,
            )
            continue
        assert got_err is None, got_err
        for w, g in zip(
            torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)
        ):
            torch.testing.assert_close(g, w)
        torch.testing.assert_close(x_c, x_e)


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_output_view_sees_writes_through_its_base(dynamic):
    compiled = torchkiln.compile(view_returned_with_its_base, dynamic=dynamic)
    base, view = compiled(torch.randn(6, 3))
    assert view._base is base
    base.add_(1)
    torch.testing.assert_close(view, base[1:].t())
    expanded, base = torchkiln.compile(expanded_view_of_a_transposed_output, dynamic=dynamic)(
        torch.randn(4, 3)
    )
    assert expanded.stride()[0] == 0 and expanded._base is base
    base.mul_(-1)
    torch.testing.assert_close(expanded[2], base)
    assert not torchkiln.report(compiled).eager_fallbacks


@pytest.mark.parametrize("requires_grad", [False, True])
def test_two_equal_computations_returned_are_two_tensors(requires_grad):
    """``return x @ y, x @ y``: common subexpression elimination must not make the two outputs
    one memory (fuzz seed 974240 of tests/fuzz/steps.py): a write to one would change the other,
    which eager's two tensors never do. A value returned twice through views of one tensor
    shares it, as in eager."""

    def f(x):
        t0 = x @ x.transpose(-1, -2)
        t1 = x @ x.transpose(-1, -2)
        t = (x * 2).sum(-1)
        return t1, t0, t.view(-1), t[0]

    compiled = torchkiln.compile(f, options={"strict": True})
    x = torch.randn(4, 2, 7, requires_grad=requires_grad)
    got, want = compiled(x), f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    a, b, c, d = got
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    assert c.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    with torch.no_grad():
        a.add_(1)
    torch.testing.assert_close(b, want[1])
    if requires_grad:
        (sum(o.sum() for o in compiled(x))).backward()
        grad = x.grad.clone()
        x.grad = None
        (sum(o.sum() for o in f(x))).backward()
        torch.testing.assert_close(grad, x.grad)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
def test_batch_norm_output_laid_out_as_eager_aliases_as_eager(training, layout):
    """Eager's batch norm writes its output dense in the input's suggested memory format, so
    ``.contiguous()`` of a transposed input's output is the output itself, and a write to the
    output shows through it (fuzz seed 953194: torch's meta functions keep the input's strides,
    and the trace copied where eager aliases)."""

    def f(x, mean, var, w, b):
        t = torch.nn.functional.batch_norm(x, mean, var, w, b, training=training)
        kept = t.contiguous()
        t.mul_(2)
        return kept, t

    x = torch.randn(4, 3, 5, 6)
    x = x.transpose(-1, -2) if layout == "transposed" else x.to(memory_format=torch.channels_last)
    args = (torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3))
    compiled = torchkiln.compile(f)
    for _ in range(2):
        x = torch.randn_like(x)
        want = f(x, *(a.clone() for a in args))
        got = compiled(x, *(a.clone() for a in args))
        torch.testing.assert_close(got, want)
        assert got[1].stride() == want[1].stride()
