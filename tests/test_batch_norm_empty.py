"""Batch norm over no element (an empty batch, or an empty spatial dim) in training mode, and
the gradients of inputs of no element.

ATen's ``_batch_norm_impl_index`` returns the input scaled by the first weight and shifted by the
first bias, and leaves the running statistics as they are. The decomposition torchkiln traced
computed the statistics of nothing (NaN) and wrote them into the running mean and variance, so a
module that saw one empty batch (a detection head with no proposal) held NaN statistics from
then on (found by the fuzzer's convolution and batch norm programs, seeds 23 and 59 of
``--nn-share 1``). Each case compares the output, the running statistics after the call and
the gradients with eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _bn(x, rm, rv, w, b):
    return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5) * 2


def _bn_then_stats(x, rm, rv, w, b):
    y = _bn(x, rm, rv, w, b)
    return y, rm.sigmoid() + rv  # what a later layer reads of the statistics


@pytest.mark.parametrize("fn", [_bn, _bn_then_stats])
@pytest.mark.parametrize("shape", [(0, 4, 5), (3, 2, 0), (0, 3, 2, 2)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_empty_batch_norm_keeps_the_running_statistics(fn, shape, dynamic):
    compiled = torchkiln.compile(fn, dynamic=dynamic)
    c = shape[1]
    for _ in range(2):
        x = torch.randn(shape)
        stats = [torch.randn(c), torch.rand(c) + 0.5]
        affine = [torch.randn(c, requires_grad=True), torch.randn(c, requires_grad=True)]
        mine = [t.clone() for t in stats]
        other = [t.detach().clone().requires_grad_() for t in affine]
        got = compiled(x, *mine, *affine)
        want = fn(x, *stats, *other)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(mine, stats)  # unchanged, as eager leaves them
        assert all(torch.isfinite(t).all() for t in mine)
        outs = got if isinstance(got, tuple) else (got,)
        refs = want if isinstance(want, tuple) else (want,)
        loss_got = sum((o * 1.5).sum() for o in outs if o.requires_grad)
        loss_want = sum((o * 1.5).sum() for o in refs if o.requires_grad)
        grads = torch.autograd.grad(loss_got, affine, allow_unused=True)
        expected = torch.autograd.grad(loss_want, other, allow_unused=True)
        for g, e in zip(grads, expected):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e)
    assert torchkiln.report(compiled).eager_fallbacks == []


def _empty_head(x, rm, rv, w, b, idx, s):
    y = F.batch_norm(x, rm, rv.abs() + 0.5, w, b, training=False, eps=1e-5)
    return torch.index_select(y, 0, idx), torch.softmax(s, -1)


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_unused_empty_output_leaves_its_gradients_none(dynamic):
    """An output of no element the loss does not use (an eval batch norm of an empty batch,
    then an index_select: training fuzz seed 9245): the weight and the input reach it alone, so
    their gradients are None, as eager's. The cut saved the backward's zero fill of no element
    (an edge of capacity 0), which hid from the specialisation on absent tangents that the
    gradients were zero: an empty tensor and a zeros one came back."""
    compiled = torchkiln.compile(_empty_head, dynamic=dynamic, options={"strict": True})
    for c in (4, 3):
        values = [torch.randn(0, c, 5, 5), *(torch.randn(c) for _ in range(5))]
        g = torch.randn(c)
        per = []
        for fn in (_empty_head, compiled):
            x, w, s, rm, rv, b = (v.clone() for v in values)
            for leaf in (x, w, s):
                leaf.requires_grad_()
            idx = torch.zeros(0, dtype=torch.long)
            _, p = fn(x * 1, rm, rv, w * 1, b, idx, s * 1)
            (p * g).sum().backward()
            per.append((x.grad, w.grad, s.grad))
        assert per[1][0] is None and per[1][1] is None
        assert per[0][0] is None and per[0][1] is None
        torch.testing.assert_close(per[1][2], per[0][2])


def _two_heads(e, x, w):
    a = F.layer_norm(e, e.shape[-1:]).abs()  # e has no element
    b = torch.conv1d(x, w, padding=1)
    print(end="")  # graph break: a and b are outputs of one compiled graph
    return a + 1, b.squeeze(0)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("use_empty", [False, True])
def test_an_empty_input_reaching_only_an_unused_output_has_no_gradient(dynamic, use_empty):
    """An input of no element whose only output the loss does not use (fuzz seed 52301, layout
    shares): eager's autograd never reaches it and leaves its gradient None. Its gradient in the
    backward graph reads no tangent (the ops over no element fold to empty tensors), so the
    specialisation on absent tangents kept it: an empty gradient came back. When the loss does
    use that output, eager's gradient is an empty tensor, and so is ours."""
    compiled = torchkiln.compile(_two_heads, dynamic=dynamic, options={"strict": True})
    for rows in (7, 4):
        values = (torch.randn(rows, 3, 0), torch.randn(1, 2, 3), torch.randn(3, 2, 3))
        g = torch.randn(3, 3)
        grads = []
        for fn in (_two_heads, compiled):
            leaves = [v.clone().requires_grad_() for v in values]
            a, b = fn(*leaves)
            loss = (b * g).sum() + (a.sum() if use_empty else 0)
            loss.backward()
            grads.append([leaf.grad for leaf in leaves])
        want, got = grads
        assert (want[0] is None) == (not use_empty)
        assert (got[0] is None) == (want[0] is None)
        if use_empty:
            assert got[0].shape == want[0].shape
        for a, b in zip(got[1:], want[1:]):
            torch.testing.assert_close(a, b)
    assert torchkiln.report(compiled).eager_fallbacks == []
