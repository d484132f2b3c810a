"""Values of permuted strides under symbolic shapes (a transposed input's ``tanh`` has strides
``(1, s0)``, as eager's has).

loop-ir's density check sorted strides with ``int()``, which refuses a symbol, so every such
value was realized contiguous: user outputs came back with other strides than eager's, and a
value saved for the backward was written contiguous by the forward while its backward,
compiled from the traced strides, read it transposed: silently wrong gradients (training fuzz
seeds 3217, 3219 and 3654, where an input written in place cannot be saved and its ``tanh``
is). Each case compares values, strides and gradients with eager's, for several sizes."""

from __future__ import annotations

import pytest
import torch
import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _written_then_tanh(x):
    x.mul_(2)  # x cannot be saved now: the backward reads the saved tanh
    return torch.tanh(x)


def _tanh(x):
    return torch.tanh(x) * x.sin()


def _scaled_softmax(x):
    return torch.softmax(x * 3, -1) + x


@pytest.mark.parametrize("fn", [_written_then_tanh, _tanh, _scaled_softmax])
@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_transposed_values_keep_eagers_strides_and_gradients(fn, codegen):
    compiled = torchkiln.compile(fn, dynamic=True, options={"codegen": codegen})
    for rows, cols in ((2, 7), (3, 5), (4, 6)):
        leaf = torch.randn(rows, cols, dtype=torch.float64, requires_grad=True)
        outs, grads = [], []
        for f in (compiled, fn):
            x = torch.zeros(cols, rows, dtype=torch.float64).t()  # transposed, no leaf
            x.copy_(leaf)
            out = f(x)
            weight = torch.arange(out.numel(), dtype=torch.float64).view(out.shape)
            (g,) = torch.autograd.grad((out * weight).sum(), [leaf])
            outs.append(out)
            grads.append(g)
        torch.testing.assert_close(outs[0], outs[1])
        assert outs[0].stride() == outs[1].stride()
        torch.testing.assert_close(grads[0], grads[1])
    assert torchkiln.report(compiled).eager_fallbacks == []
