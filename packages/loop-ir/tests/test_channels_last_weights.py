"""channels_last.py's weight cache: a convolution weight converted to channels-last once, again
after any change of the tensor, and forgotten with the tensor (the pass itself is CUDA-only; its
runtime function runs on the CPU too)."""

from __future__ import annotations

import gc

import torch
import torch.nn.functional as F
from torchkiln_loop_ir import channels_last as CL


def _channels_last(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last)


def test_weight_converted_once_and_matches():
    w = torch.randn(8, 3, 3, 3)
    first = CL._weight(w)
    assert _channels_last(first) and torch.equal(first, w)
    assert CL._weight(w) is first  # kept while the tensor is unchanged


def test_weight_converted_again_after_a_change():
    w = torch.randn(8, 3, 3, 3)
    first = CL._weight(w)
    with torch.no_grad():
        w.mul_(2)  # in place: the version counter moves
    second = CL._weight(w)
    assert second is not first and torch.equal(second, w)
    w.data = torch.randn(8, 3, 3, 3)  # another storage: the data pointer moves
    third = CL._weight(w)
    assert third is not second and torch.equal(third, w)


def test_channels_last_weight_is_used_as_it_is():
    w = torch.randn(8, 3, 3, 3).contiguous(memory_format=torch.channels_last)
    assert CL._weight(w) is w


def test_entry_dies_with_its_weight():
    w = torch.randn(4, 2, 3, 3)
    CL._weight(w)
    key = id(w)
    assert key in CL._WEIGHTS
    del w
    gc.collect()
    assert (
        key not in CL._WEIGHTS or CL._WEIGHTS[key][0]() is not None
    )  # a new tensor may reuse the id


def test_conv_channels_last_matches_eager():
    x, w = torch.randn(2, 3, 9, 9), torch.randn(6, 3, 3, 3)
    out = CL._conv_channels_last(x, w, [2, 2], [1, 1], [1, 1], 1)
    torch.testing.assert_close(out, F.conv2d(x, w, stride=2, padding=1), atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        w.add_(1)
    out = CL._conv_channels_last(
        x, w, [2, 2], [1, 1], [1, 1], 1
    )  # the changed weight, not the cached one
    torch.testing.assert_close(out, F.conv2d(x, w, stride=2, padding=1), atol=1e-4, rtol=1e-4)


def test_conv1x1_as_matmul_matches_eager():
    """The 1x1 convolution as a matrix multiply: equal to eager's convolution for inputs and
    weights of either layout, with a channels-last result."""
    torch.manual_seed(0)
    for x_channels_last in (True, False):
        for w_channels_last in (True, False):
            x = torch.randn(3, 16, 5, 7, dtype=torch.bfloat16)
            w = torch.randn(24, 16, 1, 1, dtype=torch.bfloat16)
            if x_channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if w_channels_last:
                w = w.contiguous(memory_format=torch.channels_last)
            out = CL._conv1x1_channels_last(x, w)
            assert _channels_last(out) and out.shape == (3, 24, 5, 7)
            expected = F.conv2d(x.double(), w.double())
            torch.testing.assert_close(out.double(), expected, atol=5e-2, rtol=2e-2)
