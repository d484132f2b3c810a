"""Graph inputs written in grad mode with a value that requires grad, compiled with eager's
gradients.

Two forms reach a graph after a break:
- an input that does not require grad, filled from one that does (``z[:, 1:5] = s``): in eager,
  ``z`` then requires grad (its ``grad_fn`` is the copy) and the gradient flows through it to
  ``s``. Longformer's attention scores are made so: a break's step allocates them (``new_zeros``
  with a tensor in its size) and the next graph fills them;
- an input that requires grad (made by the graph before the break, so no leaf) written in place
  (``h.mul_(2)``, ``h[:, 0] = v``), also where it shares its memory with another input (``h``
  and its view ``h[:, 0]`` both reach the graph): the graph is traced over one synthetic base
  of the two, whose new value is copied back into a view of ``h`` with autograd recording.

The write-back of a mutated input kept no autograd history: the first form silently lost the
gradient through ``z`` (the query and key weights of Longformer got none), and was then refused
(the graph ran eagerly); the second failed the joint trace (there, the input is a leaf) and ran
eagerly too. Now the new value of such an input is a differentiable output of the compiled
graph, copied back into the input with autograd recording, as eager's write is. Each test
compares values and gradients with eager on fresh inputs and counts no fallback."""

from __future__ import annotations

import pytest
import torch
import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _break() -> None:
    print(end="")  # a graph break: what follows is a graph whose inputs the first made


def _fill(s, n):
    z = s.new_zeros((s.shape[0], n + 0))  # a 0-d tensor in the size: a break makes z eagerly
    z[:, 1:5] = s
    return z


def _filled(x, w, n):
    return _fill(x @ w, n).relu()


def _scaled_in_place(x, w):
    h = x @ w
    _break()
    h.mul_(2).add_(1)
    return h.tanh()


def _column_written(x, w):
    h = x @ w
    _break()
    h[:, 0] = h[:, 1].tanh()  # tanh saves its result, not h (bounded: sin stays well-conditioned)
    return h.sin()


def _returns_the_written_input(x, w):
    h = x @ w
    _break()
    h.add_(x)
    return h, h[1:]


def _written_under_no_grad_and_grad(x, w):
    h = x @ w
    _break()
    with torch.no_grad():
        h.mul_(0.5)
    h.add_(x.square())
    return h.sigmoid()  # bounded: the comparison stays well-conditioned (exp was not)


def _view_written(x, w):
    h = x @ w
    v = h[:, 0]  # h and v reach the next graph as two inputs over one memory
    _break()
    v.mul_(2)
    return h.tanh(), v.sin()


def _base_written_view_read(x, w):
    h = x @ w
    v = h[1:]
    _break()
    h.add_(1)
    return v.sigmoid()


def _view_written_from_another(x, w):
    h = x @ w
    u, v = h[0], h[1]
    _break()
    u.add_(v.tanh())
    return h.cos()


def _view_written_under_no_grad(x, w):
    h = x @ w
    v = h[:, 1:]
    _break()
    with torch.no_grad():
        v.mul_(0.5)
    return (h * 2).sin()


def _transposed_row_written(x, w):
    h = x @ w
    t = h.t()
    _break()
    t[0].mul_(3)
    return h.sigmoid().sum(0), t


def _two_squares():
    return torch.randn(4, 4), torch.randn(4, 4)


CASES = {
    "filled-from-grad": (_filled, lambda: (torch.randn(4, 4), torch.randn(4, 4), torch.tensor(6))),
    "scaled-in-place": (_scaled_in_place, _two_squares),
    "column-written": (_column_written, _two_squares),
    "returns-written-input": (
        _returns_the_written_input,
        _two_squares,
    ),
    # inputs over one memory (views of one result), one written: traced through a synthetic
    # base (aliasing.py) whose new value is copied back with autograd recording
    "view-written": (_view_written, _two_squares),
    "base-written-view-read": (
        _base_written_view_read,
        _two_squares,
    ),
    "view-written-from-another": (
        _view_written_from_another,
        _two_squares,
    ),
    "view-written-under-no-grad": (
        _view_written_under_no_grad,
        _two_squares,
    ),
    "transposed-row-written": (
        _transposed_row_written,
        _two_squares,
    ),
    "no-grad-then-grad": (
        _written_under_no_grad_and_grad,
        _two_squares,
    ),
}


def _outputs(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple) else [out]


def _sized(make, rows: int):
    """``make``'s inputs with ``rows`` rows in the first (a new size for each call)."""
    x, *rest = make()
    return (torch.randn(rows, *x.shape[1:]), *rest)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_are_eagers(name, dynamic):
    """dynamic: symbolic sizes, a new batch each call. The backward reads the written input's
    sizes and strides (its gradient's shape), which the min-cut could not save: they are read
    from the graph's clone of it (``joint._geometry_from_clones``)."""
    fn, make = CASES[name]
    compiled = torchkiln.compile(fn, dynamic=dynamic)
    for rows in (4, 6, 5):
        x, w, *rest = _sized(make, rows) if dynamic else make()
        w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
        got, want = _outputs(compiled(x, w1, *rest)), _outputs(fn(x, w2, *rest))
        assert [g.requires_grad for g in got] == [t.requires_grad for t in want]
        torch.testing.assert_close(got, want)
        seeds = [torch.randn_like(t) for t in want]
        (g1,) = torch.autograd.grad(sum((o * s).sum() for o, s in zip(got, seeds)), [w1])
        (g2,) = torch.autograd.grad(sum((o * s).sum() for o, s in zip(want, seeds)), [w2])
        torch.testing.assert_close(g1, g2)
    report = torchkiln.report(compiled)
    assert report.eager_fallbacks == [], [f.reason for f in report.eager_fallbacks]


def _writes_its_input(h, x):
    h.add_(x)
    return h * 2


def test_a_leaf_that_requires_grad_written_in_grad_mode_raises_eagers_error():
    compiled = torchkiln.compile(_writes_its_input)
    x = torch.randn(3)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        _writes_its_input(torch.randn(3, requires_grad=True), x)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(torch.randn(3, requires_grad=True), x)


def test_a_leaf_passed_where_the_graph_was_compiled_for_a_non_leaf_raises_eagers_error():
    compiled = torchkiln.compile(_writes_its_input)
    x, base = torch.randn(3), torch.randn(3, requires_grad=True)
    got, want = compiled(base * 1, x), _writes_its_input(base * 1, x)  # non-leaves: compiled
    torch.testing.assert_close(got, want)
    (g1,) = torch.autograd.grad(got.sum(), [base])
    (g2,) = torch.autograd.grad(want.sum(), [base])
    torch.testing.assert_close(g1, g2)
    assert torchkiln.report(compiled).eager_fallbacks == []
    leaf = torch.randn(3, requires_grad=True)  # leafness is not guarded: the runtime checks it
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(leaf, x)
    assert leaf.grad_fn is None and leaf._version == 0  # nothing was written


def test_a_view_of_a_leaf_that_requires_grad_written_in_grad_mode_raises_eagers_error():
    """Compiled for a view of a non-leaf, then called with a view of a leaf (a parameter's
    slice): the runtime raises eager's error before anything runs, as it does for a leaf."""
    compiled = torchkiln.compile(_writes_its_input)
    x, base = torch.randn(3), torch.randn(4, requires_grad=True)
    got, want = compiled((base * 1)[1:], x), _writes_its_input((base * 1)[1:], x)
    torch.testing.assert_close(got, want)
    leaf = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        _writes_its_input(leaf[1:], x)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        compiled(leaf[1:], x)
    assert leaf._version == 0  # nothing was written


def _reads_an_expanded_input(x0):
    t1 = x0.expand(2, 7)
    t2 = t1 @ t1.transpose(-1, -2)
    _break()  # t1, expanded (elements sharing memory), reaches the next graph unwritten
    return t2 * t2, t1.var(dim=0)


def test_an_expanded_input_that_requires_grad_is_not_taken_for_written():
    """Training fuzz seed 658: an input whose elements share memory gets no stand-in (it could
    not be written anyway), and since it required grad it was counted as written; the copy
    back then refused to write an expanded tensor and the graph ran eagerly."""
    compiled = torchkiln.compile(_reads_an_expanded_input)
    for _ in range(2):
        leaf = torch.randn(1, 7, requires_grad=True)
        other = leaf.detach().clone().requires_grad_()
        got, want = compiled(leaf * 1), _reads_an_expanded_input(other * 1)
        torch.testing.assert_close(got, want)
        (g1,) = torch.autograd.grad(sum(t.sum() for t in got), [leaf])
        (g2,) = torch.autograd.grad(sum(t.sum() for t in want), [other])
        torch.testing.assert_close(g1, g2)
    assert torchkiln.report(compiled).eager_fallbacks == []


def _empty_written_through_a_view(x0, idx):
    t0 = x0.transpose(1, 0)
    t0.clamp_(min=0)
    return t0.var(dim=0)[idx]


def test_an_empty_input_written_in_grad_mode_under_dynamic_shapes():
    """Training fuzz seed 4414: under symbolic sizes the gradient of an input of no element,
    written through a view, is allocated with the input's strides, which were read from the
    input itself (``clone`` of an empty tensor need not keep strides, so they were not read
    from the clone): the cut could not save the written input and found no finite cut (the
    graph ran eagerly). Its strides are products of its sizes, read from the clone's."""
    compiled = torchkiln.compile(_empty_written_through_a_view, dynamic=True)
    for rows in (7, 5, 6):
        leaf = torch.randn(rows, 0, 3, dtype=torch.float64, requires_grad=True)
        other = leaf.detach().clone().requires_grad_()
        idx = torch.randint(0, rows, (4,))
        got = compiled(leaf * 1, idx)
        want = _empty_written_through_a_view(other * 1, idx)
        torch.testing.assert_close(got, want, equal_nan=True)
        (g1,) = torch.autograd.grad(got.nansum(), [leaf], allow_unused=True)
        (g2,) = torch.autograd.grad(want.nansum(), [other], allow_unused=True)
        assert (g1 is None) == (g2 is None)
        if g2 is not None:
            torch.testing.assert_close(g1, g2)
    assert torchkiln.report(compiled).eager_fallbacks == []


def _writes_an_unused_input(x0, x1):
    t0 = x1.select(0, 0)
    t0.sigmoid_()  # x1 is written in grad mode; the loss below reads only x0's sigmoid
    return torch.sigmoid(x0)


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_input_the_loss_does_not_reach_keeps_no_gradient(dynamic):
    """Training fuzz seed 6273: the gradient of x1 reaches the backward only through x1's new
    value, whose tangent is absent. Under symbolic sizes the backward could not be specialised
    on the absent tangent (a zeros tensor of symbolic size), so the full graph ran with zeros
    and x1's leaf got a zeros gradient where eager's is None. The analysis of which gradients
    are exactly zero holds whatever the sizes: those are None now."""
    compiled = torchkiln.compile(_writes_an_unused_input, dynamic=dynamic)
    for rows in (3, 5, 4):
        l0 = torch.randn(rows, 1, dtype=torch.float64, requires_grad=True)
        l1 = torch.randn(rows - 1, requires_grad=True)
        got = compiled(l0 * 1, l1 * 1)
        g0, g1 = torch.autograd.grad(got.sum(), [l0, l1], allow_unused=True)
        r0 = l0.detach().clone().requires_grad_()
        r1 = l1.detach().clone().requires_grad_()
        want = _writes_an_unused_input(r0 * 1, r1 * 1)
        e0, e1 = torch.autograd.grad(want.sum(), [r0, r1], allow_unused=True)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(g0, e0)
        assert g1 is None and e1 is None
    assert torchkiln.report(compiled).eager_fallbacks == []
