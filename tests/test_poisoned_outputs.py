"""A graph that writes in place a value an earlier op saved for its backward: eager raises
"modified by an inplace operation" only when a backward reaches that op, so the graph trains
while the loss does not use what depends on it. The joint trace asks for every output's
gradient at once, so it raised at compile time and such graphs ran eagerly (about 0.25% of the
training fuzzer's programs). Now they compile (strict mode: a fallback raises); the outputs and
written inputs whose backward eager refuses still require grad and raise eager's error when a
gradient reaches them; the others' gradients match eager's, on fresh inputs."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import torchkiln

_REFUSED = "one of the variables needed for gradient computation has been modified"


def _strict(fn, dynamic=None):
    return torchkiln.compile(fn, dynamic=dynamic, options={"strict": True, "codegen": "cpp"})


def _saved_then_written(x, w):
    a = x * w
    b = a.sin()  # saves a
    a.mul_(3)  # ... which is then written: b's backward is refused
    c = (x * 2).tanh()  # independent of it
    return b, a, c


def _grads(fn, x, w, pick):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    outs = fn(x * 1, w)
    loss = sum((outs[k] * (k + 1.5)).sum() for k in pick)
    loss.backward()
    return [o.detach() for o in outs], x.grad, w.grad


@pytest.mark.parametrize("dynamic", [None, True])
def test_an_output_whose_backward_eager_refuses(dynamic):
    compiled = _strict(_saved_then_written, dynamic)
    for n in (5, 7, 6):
        x, w = torch.randn(n), torch.randn(n)
        for pick in ((1,), (2,), (1, 2)):  # losses that reach no refused node
            got, want = _grads(compiled, x, w, pick), _grads(_saved_then_written, x, w, pick)
            for g, e in zip(got[0], want[0]):
                torch.testing.assert_close(g, e)
            for g, e in zip(got[1:], want[1:]):
                torch.testing.assert_close(g, e)
        outs = compiled(x.requires_grad_() * 1, w)
        assert [o.requires_grad for o in outs] == [True, True, True]
        for pick in ((0,), (0, 2)):  # a loss over b: eager's error, from the compiled backward
            for fn in (_saved_then_written, compiled):
                outs = fn(x * 1, w)
                with pytest.raises(RuntimeError, match=_REFUSED):
                    sum(outs[k].sum() for k in pick).backward()
        x.requires_grad_(False)
    assert not torchkiln.report(compiled).eager_fallbacks


def _writes_its_input(x, y):
    t = x.t()
    t.sigmoid_()  # saves its result: x's value now
    t.add_(y)  # x written again: the backward of x's new value is refused
    return (y * 3).cos(), x.sum(0).detach()


@pytest.mark.parametrize("dynamic", [None, True])
def test_an_input_whose_new_value_eager_refuses_to_differentiate(dynamic):
    """The refused value is an input written in grad mode (training fuzz seed 961): it is still
    written back with autograd recording, so a loss over it raises eager's error, and one over
    the outputs alone gets eager's gradients."""
    compiled = _strict(_writes_its_input, dynamic)
    for rows, cols in ((3, 4), (5, 2)):
        x0, y0 = torch.randn(cols, rows), torch.randn(rows, cols)
        per = {}
        for name, fn in (("eager", _writes_its_input), ("compiled", compiled)):
            leaf, y = x0.clone().requires_grad_(), y0.clone().requires_grad_()
            x = leaf * 1
            out, total = fn(x, y)
            assert x.requires_grad and out.requires_grad and not total.requires_grad
            (out * 2).sum().backward()
            per[name] = (out.detach(), total, x.detach(), y.grad, leaf.grad)
            x = x0.clone().requires_grad_() * 1
            fn(x, y0)
            with pytest.raises(RuntimeError, match=_REFUSED):
                x.sum().backward()
        for g, e in zip(per["compiled"], per["eager"]):
            torch.testing.assert_close(g, e)
    assert not torchkiln.report(compiled).eager_fallbacks
