"""Accumulating scatters whose threads own a range of the innermost variable (``_owned.py``):
an embedding's gradient into few rows (BERT's token types) or many, repeated ids, a 2-D
index_put and a sum of both into a computed base, against eager on fresh inputs; the source
has no atomic where the index keeps the variable's values apart, and keeps them where it does
not (a scatter along the last dim), for a column count under the minimum, or when turned off."""

from __future__ import annotations

import pytest
import torch
from torchkiln_codegen_cpp import CppOptions


def embedding_grad(grad, ids, rows):
    return torch.ops.aten.embedding_dense_backward(grad, ids, rows, -1, False)


@pytest.mark.parametrize("rows,cols", [(2, 128), (50, 96), (7, 33)])
def test_embedding_gradient_runs_without_atomics(e2e, rows, cols):
    ids = torch.randint(0, rows, (16, 24))
    ids[0, :10] = rows - 1  # one row receives many tokens
    grad = torch.randn(16, 24, cols)
    compiled = e2e.compile(lambda g, i: embedding_grad(g, i, rows))
    torch.testing.assert_close(
        compiled(grad, ids), embedding_grad(grad, ids, rows), rtol=1e-5, atol=1e-5
    )
    source = e2e.sources(compiled)
    assert "tk_lo" in source and "omp atomic" not in source, source


def test_index_put_into_a_computed_base_and_two_index_dims(e2e):
    def f(base, i, j, v):
        out = torch.index_put(base * 2, (i, j), v, accumulate=True)  # out[i, j, :] += v
        return out

    base = torch.randn(4, 5, 64)
    i, j = torch.randint(0, 4, (300,)), torch.randint(0, 5, (300,))
    v = torch.randn(300, 64)
    compiled = e2e.compile(f)
    torch.testing.assert_close(compiled(base, i, j, v), f(base, i, j, v), rtol=1e-5, atol=1e-5)
    assert "omp atomic" not in e2e.sources(compiled)


def test_atomics_stay_where_threads_could_meet_or_when_off(e2e):
    def along_last(x, idx, src):  # out[r, idx[r, c]] += src[r, c]: c's values may meet
        return torch.scatter_add(x, 1, idx, src)

    x, src = torch.randn(64, 40), torch.randn(64, 40)
    idx = torch.randint(0, 40, (64, 40))
    compiled = e2e.compile(along_last)
    torch.testing.assert_close(compiled(x, idx, src), along_last(x, idx, src), rtol=1e-5, atol=1e-5)
    assert "omp atomic" in e2e.sources(compiled)

    narrow = e2e.compile(lambda g, i: embedding_grad(g, i, 3))  # 8 columns: below MIN_COLUMNS
    g, i = torch.randn(16, 24, 8), torch.randint(0, 3, (16, 24))
    torch.testing.assert_close(narrow(g, i), embedding_grad(g, i, 3), rtol=1e-5, atol=1e-5)
    assert "omp atomic" in e2e.sources(narrow)

    off = e2e.compile(
        lambda g, i: embedding_grad(g, i, 2), cpp_options=CppOptions(owned_scatter=False)
    )
    g, i = torch.randn(16, 24, 128), torch.randint(0, 2, (16, 24))
    torch.testing.assert_close(off(g, i), embedding_grad(g, i, 2), rtol=1e-5, atol=1e-5)
    assert "omp atomic" in e2e.sources(off)


def test_an_out_of_range_index_still_raises_eagers_error(e2e):
    def f(base, i, v):
        return torch.index_put(base, (i,), v, accumulate=True)

    base, v = torch.randn(2, 64), torch.randn(24, 64)
    i = torch.randint(0, 2, (24,))
    compiled = e2e.compile(f)
    torch.testing.assert_close(compiled(base, i, v), f(base, i, v), rtol=1e-5, atol=1e-5)
    assert "omp atomic" not in e2e.sources(compiled)
    i[5] = 7
    with pytest.raises(IndexError) as eager:
        f(base, i, v)
    with pytest.raises(type(eager.value)):
        compiled(base, i, v)


def test_the_index_rule_keeps_every_store_on_its_own_column():
    """``_coefficient``: one store form per kernel, any offset a multiple of the block (a store
    shifted by one column would land on another thread's range)."""
    import sympy
    from torchkiln_codegen_cpp._owned import _coefficient
    from torchkiln_loop_ir.indexing import index_symbol

    c, r, i = index_symbol("x", 1), index_symbol("x", 0), sympy.Symbol("i8", integer=True)
    assert _coefficient(c + 128 * i, c, 128) == 1
    assert _coefficient(2 * c + 256 * i + 512 * r + 1024, c, 128) == 2
    assert _coefficient(c + 128 * i + 1, c, 128) is None  # shifted onto the next column
    assert _coefficient(c + 64 * i, c, 128) is None  # rows closer than the columns' span
    assert _coefficient(c + i, c, 128) is None  # the scattered index on the column itself
    assert _coefficient(c * i + 128 * r, c, 128) is None
