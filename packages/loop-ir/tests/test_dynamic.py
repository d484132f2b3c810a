"""Symbolic sizes: one compiled graph serves inputs of other sizes (sizes read in the wrapper)."""

from __future__ import annotations

import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx


def test_symbolic_shapes_run_at_new_sizes():
    def f(x, y):
        return ((x * 2 + y).relu().sum(1), torch.softmax(x, -1), x.t() + 1, x.view(-1) * 3)

    x, y = torch.randn(7, 33), torch.randn(33)
    gm = make_fx(f, decomposition_table=L.decompositions(), tracing_mode="symbolic")(x, y)
    cg = L.compile_graph(gm, [x, y], L.ReferenceBackend())
    assert cg.scheduled.size_symbols and all(k.size_args for k in cg.kernel_specs)
    for xx, yy in [
        (x, y),
        (torch.randn(5, 12), torch.randn(12)),
        (torch.randn(1, 1), torch.randn(1)),
    ]:
        for got, want in zip(cg(xx, yy), f(xx, yy)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_extern_result_with_other_strides_at_symbolic_sizes():
    """CPU attention returns its result in a layout of its own; with symbolic sizes the wrapper
    must still hand the kernels after it the layout they were generated for."""
    import torch.nn.functional as F

    def f(q, k, v):
        b, h, t, d = q.shape
        o = F.scaled_dot_product_attention(q, k, v).view(b, h, t, d)
        return (o.permute(0, 2, 1, 3).reshape(b, t, h * d) * 2,)

    q, k, v = (torch.randn(2, 4, 7, 8) for _ in range(3))
    gm = make_fx(f, decomposition_table=L.decompositions(), tracing_mode="symbolic")(q, k, v)
    assert "flash_attention" in gm.code  # the extern whose result has a layout of its own
    cg = L.compile_graph(gm, [q, k, v], L.ReferenceBackend())
    for t in (7, 12, 3):
        q, k, v = (torch.randn(2, 4, t, 8) for _ in range(3))
        torch.testing.assert_close(cg(q, k, v)[0], f(q, k, v)[0], atol=1e-5, rtol=1e-5)


def test_slice_start_further_back_than_a_symbolic_dim_clamps_to_zero():
    """``x[-5:]`` of a symbolic dim of 2-4 starts at Max(s0 - 5, 0) = 0, as eager: the start was
    s0 - 5 unclamped, so the view returned came out at storage offset -9 and the call raised
    "invalid storage offset" (fuzz seed 600161), and a value computed from it read before the
    input."""

    def f(x):
        t = x[-5:1]
        return t[0:5], t.mean(-1), (x[-5:] * 2).sum(0)

    x = torch.randn(2, 3, 1)
    gm = make_fx(f, decomposition_table=L.decompositions(), tracing_mode="symbolic")(x)
    cg = L.compile_graph(gm, [x], L.ReferenceBackend())
    assert cg.scheduled.size_symbols
    for n in (2, 3, 4):
        x = torch.randn(n, 3, 1)
        for got, want in zip(cg(x), f(x)):
            torch.testing.assert_close(got, want)
            assert got.storage_offset() == want.storage_offset() or got.numel() == 0
