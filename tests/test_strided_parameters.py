"""Convolutions and linear layers whose weight or bias is not contiguous (a step slice, a
transpose, channels-last), compiled through oneDNN on the CPU: values equal eager's.

oneDNN's convolution reads its bias as contiguous: a bias of stride 2 gave results off by up to
2.6 (fuzz seed 6849 of the mixed shares, a ``conv2d`` whose bias input was a step slice); the
bias is made contiguous before the call now (a no-op for a contiguous one)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _step(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a tensor of stride 2 along its first dim."""
    out = torch.zeros(t.shape[0] * 2, *t.shape[1:])[::2]
    return out.copy_(t)


def _conv(x, w, b):
    return F.conv2d(x, w, b, padding=1).relu()


def _conv_add(x, w, b, r):
    return (F.conv2d(x, w, b) + r).relu()


def _linear(x, w, b):
    return F.linear(x, w, b).relu()


@pytest.mark.parametrize("layout", ["step", "transposed", "channels_last", "bias_step"])
def test_a_convolution_of_any_parameter_layout(layout):
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3), torch.randn(6)
    want = _conv(x, w, b)
    args = {
        "step": (_step(w), b),
        "transposed": (torch.zeros(4, 6, 3, 3).transpose(0, 1).copy_(w), b),
        "channels_last": (w.contiguous(memory_format=torch.channels_last), b),
        "bias_step": (w, _step(b)),
    }[layout]
    compiled = torchkiln.compile(_conv, options={"strict": True})
    for _ in range(2):
        torch.testing.assert_close(compiled(x, *args), want)


def test_a_convolution_with_a_residual_add_and_a_strided_bias():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 8, 8), torch.randn(4, 4, 1, 1), torch.randn(4)
    r = torch.randn(2, 4, 8, 8)
    compiled = torchkiln.compile(_conv_add, options={"strict": True})
    torch.testing.assert_close(compiled(x, w, _step(b), r), _conv_add(x, w, b, r))


@pytest.mark.parametrize("shape", [(5, 8), (2, 5, 8), (64, 256)])
def test_a_linear_layer_with_strided_parameters(shape):
    torch.manual_seed(0)
    x, w, b = torch.randn(shape), torch.randn(16, shape[-1]), torch.randn(16)
    want = _linear(x, w, b)
    for args in ((_step(w), b), (w, _step(b))):
        compiled = torchkiln.compile(_linear, options={"strict": True})
        torch.testing.assert_close(compiled(x, *args), want)
