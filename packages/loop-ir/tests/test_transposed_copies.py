"""transposed_copies.py: the copy ATen's matmul makes of a transposed operand (attention's
``k^T``, heads split from a projection) is written in the order it is read, and the product
reads it transposed: the same values as eager."""

from __future__ import annotations

import torch
from torchkiln_loop_ir import LoopIROptions
from torchkiln_loop_ir.ir import ComputedBuffer


def _scores(x, y):
    """``q @ (k^T * s)`` with q and k split into 4 heads of 8 from (2, 16, 32) projections."""
    b, s, e = x.shape
    q = x.view(b, s, 4, e // 4).permute(0, 2, 1, 3)
    k = y.view(b, s, 4, e // 4).permute(0, 2, 1, 3)
    return q @ (k.transpose(-1, -2) * 0.5)


def _copies(cg) -> list[ComputedBuffer]:
    return [n for n in cg.graph_ir.nodes if isinstance(n, ComputedBuffer)]


def test_key_transpose_copy_is_written_in_read_order(check):
    torch.manual_seed(0)
    x, y = torch.randn(2, 16, 32), torch.randn(2, 16, 32)
    cg = check(_scores, x, y)
    assert any("written in read order" in line for line in cg.linear_log), cg.linear_log
    # the copy of k^T, (b * heads, d, s), is laid out (b * heads, s, d) in memory: d, the
    # contiguous dim of k, is its contiguous dim too; bmm reads it as it is (no second copy)
    (copy,) = [c for c in _copies(cg) if tuple(c.layout.size) == (8, 8, 16)]
    assert tuple(copy.layout.stride) == (128, 1, 8)
    assert len(_copies(cg)) == 2  # q's and k^T's copies, as without the rewrite
    for _ in range(2):
        x, y = torch.randn(2, 16, 32), torch.randn(2, 16, 32)
        torch.testing.assert_close(cg(x, y)[0], _scores(x, y), atol=1e-5, rtol=1e-5)


def test_copy_read_elsewhere_keeps_its_layout(check):
    """The copied ``k^T`` is also returned: its layout is the caller's, so it stays."""
    torch.manual_seed(1)

    def fn(x, y):
        b, s, e = x.shape
        kt = y.view(b, s, 4, e // 4).permute(0, 2, 3, 1).contiguous()
        return x.view(b, s, 4, e // 4).permute(0, 2, 1, 3) @ kt, kt

    x, y = torch.randn(2, 16, 32), torch.randn(2, 16, 32)
    cg = check(fn, x, y)
    assert not any("written in read order" in line for line in cg.linear_log)


def test_option_off_keeps_the_copy(check):
    torch.manual_seed(2)
    x, y = torch.randn(2, 16, 32), torch.randn(2, 16, 32)
    cg = check(_scores, x, y, options=LoopIROptions(coalesce_transposed_copies=False))
    assert not any("read order" in line for line in cg.linear_log)
