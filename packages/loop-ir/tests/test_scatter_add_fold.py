"""A scatter into zeros added to a tensor folds into a scatter into the tensor
(scatter_add_fold.py): equal to eager on fresh random inputs (duplicate indices, either
operand order, a graph input or a computed tensor as the base), logged; declined where the zeros
or the scatter have another use, the sizes broadcast or the scatter replaces values."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as L
from torchkiln_loop_ir.scatter_add_fold import fold_scatter_adds

aten = torch.ops.aten


def _embedding_grad(grad_out, ids, rows):
    """embedding_dense_backward as its decomposition writes it: grads scattered into zeros."""
    zeros = torch.zeros(rows, grad_out.shape[-1], dtype=grad_out.dtype)
    return torch.index_put(zeros, (ids,), grad_out, accumulate=True)


def _folds(cg) -> list[str]:
    return [line for line in cg.linear_log if "accumulates into" in line]


@pytest.mark.parametrize("reverse", [False, True])
def test_tied_weight_gradient_folds_and_equals_eager(check, reverse):
    def f(head_grad, h, grad_out, ids):
        product = head_grad.t() @ h  # the output projection's weight gradient, (V, C)
        scattered = _embedding_grad(grad_out, ids, product.shape[0])
        return scattered + product if reverse else product + scattered

    ids = torch.randint(0, 37, (64,))
    ids[:8] = 5  # duplicates accumulate
    inputs = (torch.randn(64, 37), torch.randn(64, 16), torch.randn(64, 16), ids)
    cg = check(f, *inputs, atol=1e-5, rtol=1e-5)
    assert len(_folds(cg)) == 1, cg.linear_log
    off = L.LoopIROptions(fold_scatter_adds=False)
    assert not _folds(check(f, *inputs, atol=1e-5, rtol=1e-5, options=off))


def test_a_graph_input_as_the_base_is_not_written(check):
    base = torch.randn(11, 8)
    kept = base.clone()
    ids = torch.randint(0, 11, (20,))
    cg = check(lambda b, g, i: b + _embedding_grad(g, i, 11), base, torch.randn(20, 8), ids)
    assert len(_folds(cg)) == 1
    assert torch.equal(base, kept)  # index_put copies its base: the input is unchanged


def test_declined_where_the_rewrite_would_not_hold(trace):
    g, ids = torch.randn(20, 8), torch.randint(0, 11, (20,))

    def zeros_used_twice(b, g, i):
        zeros = torch.zeros(11, 8)
        return b + torch.index_put(zeros, (i,), g, accumulate=True), zeros

    def scatter_used_twice(b, g, i):
        s = _embedding_grad(g, i, 11)
        return b + s, s * 2

    def broadcast(b, g, i):
        return b + _embedding_grad(g, i, 11)

    def replaces(b, g, i):
        return b + torch.index_put(torch.zeros(11, 8), (i,), g, accumulate=False)

    def not_zeros(b, g, i):
        return b + torch.index_put(torch.ones(11, 8), (i,), g, accumulate=True)

    for fn, base in (
        (zeros_used_twice, torch.randn(11, 8)),
        (scatter_used_twice, torch.randn(11, 8)),
        (broadcast, torch.randn(8)),
        (replaces, torch.randn(11, 8)),
        (not_zeros, torch.randn(11, 8)),
    ):
        gm = trace(fn, base, g, ids)
        new, log = fold_scatter_adds(gm)
        assert new is gm and log == (), fn.__name__


def _scatter_targets(cg) -> list[str]:
    return [
        n.reason for n in cg.graph_ir.nodes if getattr(n, "reason", "") == "target of a scatter"
    ]


@pytest.mark.parametrize("backend", ["reference", "cpp", "triton"])
def test_the_scatter_stores_into_a_product_nothing_else_reads(check, backend):
    """After the fold the scatter accumulates into the product itself (lowering/indexing.py's
    ``_dead_extern_result``), seen directly or through views of its own layout: no copy of it. Where the product has another reader, the scatter
    gets its copy, and that reader sees the product unchanged."""
    from torchkiln_codegen_cpp import CppBackend
    from torchkiln_codegen_triton import TritonBackend

    made = {"reference": L.ReferenceBackend, "cpp": CppBackend, "triton": TritonBackend}[backend]

    def alone(head_grad, h, grad_out, ids):
        return (head_grad.t() @ h + _embedding_grad(grad_out, ids, 37),)

    def through_views(head_grad, h, grad_out, ids):
        # GPT-2's backward transposes the product twice before the sum
        return ((head_grad.t() @ h).t().t() + _embedding_grad(grad_out, ids, 37),)

    def shared(head_grad, h, grad_out, ids):
        product = head_grad.t() @ h
        return product + _embedding_grad(grad_out, ids, 37), product * 2

    for f, copies in ((alone, 0), (through_views, 0), (shared, 1)):
        ids = torch.randint(0, 37, (64,))
        ids[:8] = 5
        inputs = (torch.randn(64, 37), torch.randn(64, 16), torch.randn(64, 16), ids)
        cg = check(f, *inputs, atol=1e-5, rtol=1e-5, backend=made())
        assert len(_folds(cg)) == 1 and len(_scatter_targets(cg)) == copies, cg.graph_ir.nodes
        # fresh inputs through the same compiled graph
        fresh = (torch.randn(64, 37), torch.randn(64, 16), torch.randn(64, 16), ids.flip(0))
        for got, want in zip(cg(*fresh), f(*fresh)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
