"""A graph input that does not require grad, written with a value that does (``z[:, 1:5] = s``):
in eager, ``z`` then requires grad (its ``grad_fn`` is the copy) and the gradient flows through
it to ``s``. Longformer's attention scores are made so: a graph break's step allocates them
(``new_zeros`` with a tensor in its size) and the next graph fills them from the scores that
require grad. The write-back of a mutated input keeps no autograd history, so the compiled
output did not require grad and the query and key weights got no gradient at all, silently.
Such a graph is refused now and runs eagerly (counted as a fallback), so gradients are
eager's."""

from __future__ import annotations

import pytest
import torch
import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _fill(s, n):
    z = s.new_zeros((4, n + 0))  # a 0-d tensor in the size: the break's step makes z eagerly
    z[:, 1:5] = s
    return z


def _model(x, w, n):
    return _fill(x @ w, n).relu()


def test_the_gradient_through_a_filled_input_is_eagers():
    compiled = torchkiln.compile(_model)
    for _ in range(2):
        x, w, n = torch.randn(4, 4), torch.randn(4, 4), torch.tensor(6)
        w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
        got, want = compiled(x, w1, n), _model(x, w2, n)
        assert got.requires_grad and want.requires_grad
        torch.testing.assert_close(got, want)
        (g1,) = torch.autograd.grad(got.square().sum(), [w1])
        (g2,) = torch.autograd.grad(want.square().sum(), [w2])
        torch.testing.assert_close(g1, g2)
