"""Masks on the innermost index's remainder (``x1 % 32 < 16``: rotate_half's cat read per head,
as Llama's rotary embedding and its backward do) split the innermost loop into periods and
pieces (``_splits.py``'s ``period_pieces``, ``loopnest._period_loops``): the remainder becomes the
piece's own counter, so g++ folds the masks. Against eager on fresh inputs, forward and
gradients, several head widths; the source says which form ran, and a loop whose trip count
the period does not divide keeps one loop."""

from __future__ import annotations

import pytest
import torch


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(q, cos, sin, heads):
    b, s, width = q.shape
    qh = q.view(b, s, heads, width // heads).transpose(1, 2)
    out = qh * cos + rotate_half(qh) * sin
    return out.transpose(1, 2).reshape(b, s, width)


@pytest.mark.parametrize("heads,dim", [(4, 32), (3, 16), (2, 64)])
def test_rotary_forward_and_backward_split_by_period(e2e, heads, dim):
    b, s = 8, 12
    pos = torch.arange(s, dtype=torch.float32)[:, None] / (
        10000 ** (torch.arange(0, dim, 2).float() / dim)
    )
    emb = torch.cat((pos, pos), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    q = torch.randn(b, s, heads * dim, requires_grad=True)
    compiled = e2e.compile(lambda q: rotary(q, cos, sin, heads))
    got, expected = compiled(q), rotary(q, cos, sin, heads)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    grad = torch.randn_like(got)
    (g_got,) = torch.autograd.grad(got, q, grad)
    (g_exp,) = torch.autograd.grad(expected, q, grad)
    torch.testing.assert_close(g_got, g_exp, rtol=1e-5, atol=1e-5)
    assert "x1_r" in e2e.sources(compiled) or "x2_r" in e2e.sources(compiled)


def test_a_period_that_does_not_divide_the_loop_keeps_one_loop(e2e):
    def f(x):  # the innermost dim (20) is not a multiple of the period (8)
        i = torch.arange(20)
        return torch.where(i % 8 < 4, x, -x)

    x = torch.randn(64, 20)
    compiled = e2e.compile(f)
    torch.testing.assert_close(compiled(x), f(x))
    assert "_r = " not in e2e.sources(compiled)

    def g(x):  # 24 = 3 periods of 8
        i = torch.arange(24)
        return torch.where(i % 8 < 4, x.exp(), -x)

    x = torch.randn(64, 24)
    compiled = e2e.compile(g)
    torch.testing.assert_close(compiled(x), g(x), rtol=1e-6, atol=1e-6)
