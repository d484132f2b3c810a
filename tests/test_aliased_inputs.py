"""Inputs that share a storage (a tensor and its view, overlapping slices), through the whole
pipeline on the CPU: results, the inputs' state after the call and gradients equal eager's, and a
change of the aliasing between calls recompiles (never silently reuses the other entry)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchkiln


def _scale_then_read(a, b):
    a.mul_(2)
    return b + 0


def _fill_then_sum(a, b):
    b.fill_(7.0)
    return a.sum()


def _two_writes(a, b):
    a.add_(1)
    b.mul_(2)
    return a + b


def _base_write_view_read(base, view):
    base.add_(1)
    return view * 2


def _view_write_base_read(base, view):
    view.sub_(3)
    return base.sum(0)


def _compile(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an eager fallback would hide what is tested
        return torchkiln.compile(fn)


def _check(fn, make_storage, views, calls=2, compiled=None):
    """Call compiled and eager ``fn`` on ``views(storage)`` of equal fresh storages; compare the
    results and the storages after the call."""
    compiled = compiled or _compile(fn)
    for _ in range(calls):
        s_c = make_storage()
        s_e = s_c.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = compiled(*views(s_c))
        want = fn(*views(s_e))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(s_c, s_e)
    return compiled


def test_the_issue_cases():
    # eager: [0, 2] and 14; before aliasing was compiled as such: [0, 1] and 0
    x = torch.arange(2.0)
    assert _compile(_scale_then_read)(x, x[:]).tolist() == [0.0, 2.0]
    y = torch.zeros(2)
    assert _compile(_fill_then_sum)(y, y).item() == 14.0
    z = torch.zeros(2, 2)
    assert _compile(_fill_then_sum)(z, z[0]).item() == 14.0


@pytest.mark.parametrize(
    "fn", [_scale_then_read, _fill_then_sum, _base_write_view_read, _view_write_base_read]
)
def test_row_view(fn):
    _check(fn, lambda: torch.randn(3, 4), lambda s: (s, s[1]))


def test_overlapping_slices():
    _check(_two_writes, lambda: torch.randn(16), lambda s: (s[2:9], s[5:12]))


def test_transposed_view():
    _check(_base_write_view_read, lambda: torch.randn(5, 5), lambda s: (s, s.t()))
    _check(_view_write_base_read, lambda: torch.randn(4, 4), lambda s: (s, s.t()))


def test_strided_views_of_a_larger_buffer():
    # neither input starts at the storage's first element; every other column, two overlapping
    _check(_two_writes, lambda: torch.randn(6, 8), lambda s: (s[1:, 0:6:2], s[:-1, 2::2]))


def test_non_aliased_then_aliased_recompiles():
    compiled = _compile(_scale_then_read)
    _check(
        _scale_then_read, lambda: torch.randn(2, 3), lambda s: (s, s[1].clone()), compiled=compiled
    )
    _check(_scale_then_read, lambda: torch.randn(2, 3), lambda s: (s, s[1]), compiled=compiled)
    _check(
        _scale_then_read, lambda: torch.randn(2, 3), lambda s: (s, s[1].clone()), compiled=compiled
    )
    assert len(torchkiln.report(compiled).graphs) == 2


def test_aliasing_guarded_for_many_inputs():
    # the first and the last of nine inputs share a storage or not: the guard covers every pair
    def fn(a, b, c, d, e, f, g, h, i):
        a.mul_(2)
        return i + b + c + d + e + f + g + h

    others = [torch.randn(4) for _ in range(7)]
    compiled = _compile(fn)
    for aliased in (False, True, False, True):
        last = (lambda s: s[0, :]) if aliased else (lambda s: s[1].clone())
        _check(
            fn,
            lambda: torch.randn(2, 4),
            lambda s, last=last: (s[0], *others, last(s)),
            calls=1,
            compiled=compiled,
        )
    assert len(torchkiln.report(compiled).graphs) == 2


def test_gradients_through_read_only_aliases():
    def fn(a, b):
        return (a * b.sum()).sin().sum()

    compiled = _compile(fn)
    for _ in range(2):
        w_c = torch.randn(3, 4, requires_grad=True)
        w_e = w_c.detach().clone().requires_grad_()
        got, want = compiled(w_c, w_c[0]), fn(w_e, w_e[0])
        torch.testing.assert_close(got, want)
        got.backward()
        want.backward()
        torch.testing.assert_close(w_c.grad, w_e.grad)


def test_aliased_mutation_beside_an_input_that_requires_grad():
    def fn(a, b, w):
        a.mul_(2)
        return (b * w).sum()

    compiled = _compile(fn)
    for _ in range(2):
        x_c, w_c = torch.randn(3, 4), torch.randn(4, requires_grad=True)
        x_e, w_e = x_c.clone(), w_c.detach().clone().requires_grad_()
        got, want = compiled(x_c, x_c[0], w_c), fn(x_e, x_e[0], w_e)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x_c, x_e)
        got.backward()
        want.backward()
        torch.testing.assert_close(w_c.grad, w_e.grad)


def test_mutated_aliases_that_require_grad_run_eagerly_and_correctly():
    # autograd's view + in-place rules are left to eager: one warning, eager's values and grads
    compiled = torchkiln.compile(_scale_then_read)
    for _ in range(2):
        w_c = torch.randn(3, 4, requires_grad=True)
        w_e = w_c.detach().clone().requires_grad_()
        x_c, x_e = w_c * 1, w_e * 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = compiled(x_c, x_c[0])
        want = _scale_then_read(x_e, x_e[0])
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x_c, x_e)
        (got.sum() + x_c.sum()).backward()
        (want.sum() + x_e.sum()).backward()
        torch.testing.assert_close(w_c.grad, w_e.grad)


def test_a_zero_size_view_written_after_a_break_compiles():
    # graph 0 returns t and its permuted view, with no element: they share t's storage without
    # being an autograd view of one another (a zero-size output is not regenerated as a view),
    # and graph 1 writes the view. Nothing is read or written through it: no alias to trace
    def fn(x):
        t = x.abs()
        v = t.permute(0, 2, 1)
        print(end="")  # graph break
        y = v * -1.5
        v.neg_()
        return t.argmax(0, keepdim=True), y, t.sum() + x.sum()

    compiled = _compile(fn)
    for shape in [(5, 0, 4), (3, 4, 0)]:
        leaf_c = torch.randn(shape, requires_grad=True)
        leaf_e = leaf_c.detach().clone().requires_grad_()
        got, want = compiled(leaf_c * 1), fn(leaf_e * 1)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        got[2].backward()
        want[2].backward()
        torch.testing.assert_close(leaf_c.grad, leaf_e.grad)
    assert not torchkiln.report(compiled).eager_fallbacks


_VIEWS = {
    "flat slice": lambda s: s.view(-1)[3:17],
    "other flat slice": lambda s: s.view(-1)[9:21],
    "row": lambda s: s[2],
    "transpose": lambda s: s.t(),
    "every other column": lambda s: s[:, 1::2],
    "whole": lambda s: s,
}
_WRITES = [
    "a.add_(1.5)",
    "b.mul_(-2)",
    "a.fill_(3.0)",
    "b.clamp_(min=0)",
    "a.sub_(a.sum())",
    "a.mul_(2); b.add_(1)",
    "b.zero_(); a.add_(1)",
]
_READS = ["a + 0", "b * 1", "a.sum() + b.sum()", "(a.sum(), b)"]


@pytest.mark.parametrize("seed", range(6))
def test_random_views_writes_and_reads(seed):
    # seeded programs: two views of one 5x5 storage, writes through one or both, reads of either
    import random

    rng = random.Random(seed)
    view_a, view_b = rng.sample(sorted(_VIEWS), 2)
    src = f"def fn(a, b):\n    {rng.choice(_WRITES)}\n    return {rng.choice(_READS)}\n"
    scope: dict = {}
    exec(compile(src, f"<aliasing program {seed}>", "exec"), scope)
    fn = scope["fn"]
    _check(fn, lambda: torch.randn(5, 5), lambda s: (_VIEWS[view_a](s), _VIEWS[view_b](s)))


def _write_one_read_other_and_a_third(a, b, y):
    a.mul_(2)
    return b + y.sum(), y * 3


@pytest.mark.parametrize("dynamic", [True, None])
def test_aliased_mutated_inputs_under_dynamic_shapes(dynamic):
    """Under dynamic shapes (symbolic from the start, or automatic after a size change) the
    arguments that share a storage keep static sizes (their synthetic base is built from their
    geometry) while the other input stays symbolic: every call compiled, results and storages as
    eager's, and a new size of the unaliased input alone compiles nothing new."""
    compiled = torchkiln.compile(
        _write_one_read_other_and_a_third, dynamic=dynamic, options={"strict": True}
    )
    counts = []
    for n, m in ((5, 4), (7, 4), (7, 9), (7, 11), (5, 6)):
        s_c = torch.randn(n)
        s_e = s_c.clone()
        y = torch.randn(m)
        got = compiled(s_c[1:], s_c[:3], y)
        want = _write_one_read_other_and_a_third(s_e[1:], s_e[:3], y)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(s_c, s_e)
        counts.append(len(torchkiln.report(compiled).graphs))
    assert not torchkiln.report(compiled).eager_fallbacks
    # (7, 9) -> (7, 11): only y's size changed, y is symbolic by then: no new graph
    assert counts[3] == counts[2], counts
