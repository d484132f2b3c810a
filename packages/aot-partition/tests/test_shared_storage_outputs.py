"""An output that is a view of an input, where several inputs share its storage (two slices of
one projection, as Mamba's and BLOOM's ``B`` and ``C`` reach a graph after a break): the runtime
rebuilds it as a view of the input the graph viewed (``mutation.attribute_to_viewed_inputs``).
Before, the storage named the first input sharing it, the rebuilt view's gradient went to that
slice, and the rest was lost: silently wrong gradients (Mamba's, 1e-4 off where eager's float32
is 1e-8 off float64)."""

from __future__ import annotations

import pytest
import torch
from torchkiln_aot_partition import aot_compile
from torchkiln_dynamo_capture import capture


def _backend(gm, example_inputs):
    return aot_compile(gm, example_inputs, fw_compiler=lambda g, e: g)


def _views_of_c(b, c):
    return (c.transpose(1, 2),)


def _view_of_c_and_math_on_b(b, c):
    return c.transpose(1, 2), b * 2


def _c_itself_and_a_view_of_b(b, c):
    return c, b[:, :1]


@pytest.mark.parametrize("fn", [_views_of_c, _view_of_c_and_math_on_b, _c_itself_and_a_view_of_b])
def test_gradient_reaches_the_viewed_slice(fn):
    compiled = capture(fn, _backend)
    for step in range(2):  # fresh inputs each call
        torch.manual_seed(step)
        w = torch.randn(20, 6, requires_grad=True)
        x = torch.randn(2, 5, 6)
        grads, values = [], []
        for f in (compiled, fn):
            proj = (x @ w.t()).transpose(1, 2)  # non-contiguous, as a projection's split
            b, c = proj[:, 12:16], proj[:, 16:20]
            outs = f(b, c)
            loss = sum((o * torch.linspace(-1, 1, o.numel()).reshape(o.shape)).sum() for o in outs)
            (grad,) = torch.autograd.grad(loss, w)
            grads.append(grad)
            values.append([o.detach().clone() for o in outs])
        for got, expected in zip(*values, strict=True):
            torch.testing.assert_close(got, expected)
        torch.testing.assert_close(grads[0], grads[1])
