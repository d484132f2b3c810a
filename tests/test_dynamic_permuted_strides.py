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

        def call(f, leaf=leaf, rows=rows, cols=cols):
            x = torch.zeros(cols, rows, dtype=torch.float64).t()  # transposed, no leaf
            x.copy_(leaf)
            return f(x)

        _assert_agrees_with_eager(compiled, fn, leaf, call)
    assert torchkiln.report(compiled).eager_fallbacks == []


def _assert_agrees_with_eager(compiled, fn, leaf, call) -> None:
    """``call(compiled)`` and ``call(fn)`` give equal values of equal strides, and equal
    gradients of a weighted sum of them with respect to ``leaf``."""
    outs, grads = [], []
    for f in (compiled, fn):
        out = call(f)
        weight = torch.arange(out.numel(), dtype=out.dtype).view(out.shape)
        (g,) = torch.autograd.grad((out * weight).sum(), [leaf])
        outs.append(out)
        grads.append(g)
    torch.testing.assert_close(outs[0], outs[1])
    assert outs[0].stride() == outs[1].stride()
    torch.testing.assert_close(grads[0], grads[1])


def _minimum_of_permuted_convolution(x, w, b):
    # minimum's backward reads masks saved by the forward in the permuted output's layout
    y = torch.nn.functional.conv1d(x, w, None, padding=1, dilation=2).permute(2, 0, 1)
    return torch.minimum(b, y)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_permuted_convolution_output_strides_with_a_clamped_size(codegen):
    """A convolution's output under dynamic shapes has strides ``Max(1, L)`` (torch clamps a
    size that could be 0), ``(1, s53*Max(1, L), Max(1, L))`` once permuted: the density check
    compared ``Max(1, L)`` with ``L`` and called it not dense, so the forward wrote minimum's
    saved masks contiguous and the backward read them permuted (fuzz seed 30815 of
    ``--pool-share``: a wrong input gradient). Values, strides and gradients against eager's,
    for several lengths."""
    fn = _minimum_of_permuted_convolution
    compiled = torchkiln.compile(fn, dynamic=True, options={"codegen": codegen})
    for batch, length in ((5, 7), (3, 9), (4, 12)):
        w, b = torch.randn(2, 1, 3), torch.randn(2)
        leaf = torch.randn(batch, 1, length, requires_grad=True)
        _assert_agrees_with_eager(compiled, fn, leaf, lambda f, x=leaf, w=w, b=b: f(x, w, b))
    assert torchkiln.report(compiled).eager_fallbacks == []
