"""LoopIROptions.addmm_bias_in_consumer: an ``addmm`` whose result only generated code reads runs
as ``mm``, its bias added in that code (no kernel more than with ``addmm``), equal to eager in
float32 and as near a float64 reference as eager in bfloat16, on the C++ backend and Triton's
interpreter; where the bias would cost a pass of its own (the result is returned, or read by
another matmul) ``addmm`` stays."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

L = pytest.importorskip("torchkiln_loop_ir")

#: the CPU passes that take float32 linear layers to oneDNN are off: this is about the lowering
ON = L.LoopIROptions(addmm_bias_in_consumer=True, mkldnn_linear="never", group_linears=False)
OFF = L.LoopIROptions(mkldnn_linear="never", group_linears=False)


def _backends():
    from torchkiln_codegen_cpp import CppBackend

    out = [pytest.param(CppBackend, id="cpp")]
    if os.environ.get("TRITON_INTERPRET") not in (None, "", "0"):
        from torchkiln_codegen_triton import TritonBackend

        out.append(pytest.param(TritonBackend, id="triton"))
    return out


def _ffn(x, w1, b1, w2, b2, r):
    """A transformer's feed-forward block: generated code reads both products through a view
    (gelu's decomposition reads its input twice; the residual add)."""
    h = F.gelu(torch.addmm(b1, x, w1.t()).view(2, 8, 48))
    y = torch.addmm(b2, h.view(16, 48), w2.t()).view(2, 8, 24)
    return F.layer_norm(y + r, (24,))


def _inputs(dtype):
    return (
        torch.randn(16, 24, dtype=dtype),
        torch.randn(48, 24, dtype=dtype) / 5,
        torch.randn(48, dtype=dtype),
        torch.randn(24, 48, dtype=dtype) / 7,
        torch.randn(24, dtype=dtype),
        torch.randn(2, 8, 24, dtype=dtype),
    )


def _compile(fn, inputs, backend, options):
    gm = make_fx(fn, decomposition_table=L.decompositions())(*inputs)
    return L.compile_graph(gm, list(inputs), backend(), options)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_bias_is_added_in_the_consumer(backend, dtype):
    inputs = _inputs(dtype)
    on, off = (_compile(_ffn, inputs, backend, o) for o in (ON, OFF))
    calls = on.extern_calls
    assert calls.count("aten.mm") == 2 and "aten.addmm" not in calls, calls
    assert off.extern_calls.count("aten.addmm") == 2, off.extern_calls
    assert len(on.kernels) == len(off.kernels)  # the adds fused: no kernel of their own
    for _ in range(2):  # fresh inputs each call
        inputs = _inputs(dtype)
        (got,) = on(*inputs)
        expected = _ffn(*inputs)
        if dtype == torch.float32:
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        else:  # rounded once more than addmm: as near the float64 result as eager, or nearly
            exact = _ffn(*(t.double() for t in inputs))
            ours = (got.double() - exact).abs().max().item()
            eagers = (expected.double() - exact).abs().max().item()
            assert ours <= 2 * eagers + 1e-2, (ours, eagers)


def _returned(x, w, b):
    return torch.addmm(b, x, w.t())


def _read_by_a_matmul(x, w, b):
    return torch.addmm(b, x, w.t()) @ w


def _scaled(x, w, b):
    return torch.addmm(b, x, w.t(), beta=0.5).relu()


@pytest.mark.parametrize("fn", [_returned, _read_by_a_matmul, _scaled])
def test_addmm_stays_where_the_bias_would_cost_a_pass(fn):
    from torchkiln_codegen_cpp import CppBackend

    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    cg = _compile(fn, (x, w, b), CppBackend, ON)
    assert "aten.addmm" in cg.extern_calls, cg.extern_calls
    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    expected = fn(x, w, b)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for g, e in zip(cg(x, w, b), expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_two_fusing_consumers_share_the_bias_add():
    """Read by a pointwise op and a reduction, the sum is not written out for them: the same
    kernels as with ``addmm``."""
    from torchkiln_codegen_cpp import CppBackend

    def fn(x, w, b):
        y = torch.addmm(b, x, w.t())
        return y.relu() + 1, y.sigmoid().sum(-1)

    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    on, off = (_compile(fn, (x, w, b), CppBackend, o) for o in (ON, OFF))
    assert on.extern_calls == ["aten.mm"] and len(on.kernels) == len(off.kernels)
    x, w, b = torch.randn(8, 16), torch.randn(16, 16), torch.randn(16)
    for g, e in zip(on(x, w, b), fn(x, w, b), strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
