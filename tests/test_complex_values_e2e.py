"""Complex values through torchkiln.compile, against eager on fresh inputs: FFTs (FNet mixes its
tokens with ``torch.fft.fftn(x).real``), complex inputs and outputs, and a gradient through an
FFT. No kernel computes with complex values: each op that reads or makes one is ATen's (counted
as an op fallback), and kernels take over from the real values. FNet's graph had fallen back to
eager ("the C++ backend does not support dtype torch.complex64")."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import torchkiln

pytestmark = pytest.mark.usefixtures("private_cache_dir")


def _strict(fn, codegen):
    return torchkiln.compile(fn, options={"strict": True, "codegen": codegen})


def _fnet_mixing(x):
    y = torch.fft.fftn(x, dim=(1, 2))
    return torch.nn.functional.layer_norm(x + y.real, x.shape[-1:]), y.imag.abs().amax(-1)


def _round_trip(x):
    return torch.fft.irfft(torch.fft.rfft(x, dim=-1) * 0.5, n=x.shape[-1], dim=-1) + x


def _complex_out(x):
    return torch.fft.fft(x) * 2


def _complex_in(z, w):
    return (z * w).conj(), torch.view_as_real(z).sum(-1).relu()


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("fn", [_fnet_mixing, _round_trip, _complex_out])
def test_real_inputs(fn, codegen):
    compiled = _strict(fn, codegen)
    for _ in range(2):
        x = torch.randn(2, 16, 12)
        got, want = compiled(x), fn(x)
        for g, w in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want))):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_complex_inputs(codegen):
    compiled = _strict(_complex_in, codegen)
    for _ in range(2):
        z, w = (torch.randn(3, 8, dtype=torch.complex64) for _ in range(2))
        got, want = compiled(z, w), _complex_in(z, w)
        assert got[0].is_conj() == want[0].is_conj()
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)


def test_gradient_through_an_fft():
    def loss(x):
        return torch.fft.rfft(x * x).abs().sum()

    compiled = _strict(loss, "cpp")
    for _ in range(2):
        x = torch.randn(4, 10, requires_grad=True)
        (got,) = torch.autograd.grad(compiled(x), x)
        (want,) = torch.autograd.grad(loss(x), x)
        torch.testing.assert_close(got, want)
