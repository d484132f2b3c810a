"""A pointwise value handed to several extern kernels is realized once, into one buffer they
share (the ReLU a backward recomputes for a block's conv and its shortcut's conv backward)."""

from __future__ import annotations

import torch
from torchkiln_loop_ir.ir import ComputedBuffer, ExternKernel


def test_value_read_by_two_externs_is_one_buffer(check):
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(16, 24), torch.randn(24, 8), torch.randn(24, 5)

    def fn(x, w1, w2):
        h = torch.relu(x * 2)
        return h @ w1, h @ w2, (h > 0).float().sum(0)

    cg = check(fn, x, w1, w2, atol=1e-5, rtol=1e-5)
    externs = [n for n in cg.graph_ir.nodes if isinstance(n, ExternKernel)]
    assert len(externs) == 2
    (first,), (second,) = ({a.name for a in e.args[:1]} for e in externs)
    assert first == second  # both matrix multiplies read the same realized relu
    relus = [
        n
        for n in cg.graph_ir.nodes
        if isinstance(n, ComputedBuffer) and n.reason.startswith("input of extern")
    ]
    assert len(relus) == 1


def test_shared_buffer_keeps_values_across_calls(check):
    torch.manual_seed(1)

    def fn(x, w):
        h = torch.sigmoid(x) - 0.5
        return h @ w, w.t() @ h.t()

    cg = check(fn, torch.randn(9, 7), torch.randn(7, 3), atol=1e-5, rtol=1e-5)
    for _ in range(2):  # fresh inputs each call
        x, w = torch.randn(9, 7), torch.randn(7, 3)
        for got, want in zip(cg(x, w), fn(x, w)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_norm_output_a_matmul_reads_is_read_back_not_recomputed(check):
    """BERT's block: the layer norm's output feeds the next matmul and the residual add after
    it. The matmul needs it in memory, so the add reads that buffer: recomputing it there read
    the pre-norm sum instead, and had to write that sum out for the add (a fourth full pass)."""
    torch.manual_seed(2)
    x, r, m = torch.randn(6, 10, 32), torch.randn(6, 10, 32), torch.randn(32, 32) / 6
    w, b = torch.rand(32) + 0.5, torch.randn(32)

    def fn(x, r, m, w, b):
        h = torch.nn.functional.layer_norm(x + r, (32,), w, b)
        return torch.nn.functional.layer_norm(h @ m + h, (32,), w, b)

    cg = check(fn, x, r, m, w, b, atol=1e-4, rtol=1e-4)
    (norm,) = [
        n
        for n in cg.graph_ir.nodes
        if isinstance(n, ComputedBuffer) and n.reason.startswith("input of extern")
    ]
    (mm,) = [n for n in cg.graph_ir.nodes if isinstance(n, ExternKernel)]
    after = cg.kernel_specs[-1]
    assert {o.name for o in mm.outputs if o is not None} <= set(after.inputs)
    # the last kernel reads the stored norm output, not x and r again
    assert norm.name in after.inputs
    assert not {"x", "r"} & set(after.inputs), after.inputs
