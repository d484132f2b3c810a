"""Indirect indexing, masked loads, atomic stores and random numbers vs eager."""

import sympy
import torch
from _specs import buf, compile_one, spec
from torchkiln_codegen_triton import TritonOptions
from torchkiln_loop_ir.ops import ops

F32 = torch.float32


def test_indirect_gather_embedding():
    n, vocab, d = 7, 10, 33

    def body(x, r):
        i = ops.indirect_indexing(ops.load("idx", x[0]), vocab)
        ops.store("out", x[0] * d + x[1], ops.load("w", i * d + x[1]))

    k = spec(
        "gather",
        (n, d),
        (),
        [("loop", [("out", body, False)])],
        [buf("idx", torch.int64, (n,)), buf("w", F32, (vocab, d)), buf("out", F32, (n, d))],
        ["idx", "w"],
        ["out"],
    )
    idx = torch.randint(0, vocab, (n,))
    w = torch.randn(vocab, d)
    out = torch.empty(n, d)
    compile_one(k, TritonOptions(debug_asserts=True))(idx, w, out)
    torch.testing.assert_close(out, w[idx])


def test_indirect_in_reduction_and_negative_wrap():
    # out[i] = sum_j w[idx[i, j]], with negative indices wrapped as the lowering does
    n, m, vocab = 5, 9, 11

    def body(x, r):
        v = ops.load("idx", x[0] * m + r[0])
        zero = ops.constant(0, torch.int64)
        wrapped = ops.where(
            ops.lt(v, zero), ops.add(v, ops.index_expr(sympy.Integer(vocab), torch.int64)), v
        )
        i = ops.indirect_indexing(wrapped, vocab)
        ops.store_reduction("out", x[0], ops.reduction(F32, F32, "sum", ops.load("w", i)))

    k = spec(
        "gsum",
        (n,),
        (m,),
        [("loop", [("out", body, True)])],
        [buf("idx", torch.int64, (n, m)), buf("w", F32, (vocab,)), buf("out", F32, (n,))],
        ["idx", "w"],
        ["out"],
    )
    idx = torch.randint(-vocab, vocab, (n, m))
    w = torch.randn(vocab)
    out = torch.empty(n)
    compile_one(k)(idx, w, out)
    torch.testing.assert_close(out, w[idx].sum(1))


def test_masked_load_constant_pad():
    # out = F.pad(a, (2, 3), value=-1.0) along the last dim of a (4, 7)
    def body(x, r):
        j = ops.index_expr(x[1], torch.int64)
        inside = ops.logical_and(
            ops.ge(j, ops.constant(2, torch.int64)), ops.lt(j, ops.constant(9, torch.int64))
        )
        v = ops.masked(inside, lambda: ops.load("a", x[0] * 7 + x[1] - 2), -1.0)
        ops.store("out", x[0] * 12 + x[1], v)

    k = spec(
        "pad",
        (4, 12),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", F32, (4, 7)), buf("out", F32, (4, 12))],
        ["a"],
        ["out"],
    )
    a = torch.randn(4, 7)
    out = torch.empty(4, 12)
    compile_one(k)(a, out)
    torch.testing.assert_close(out, torch.nn.functional.pad(a, (2, 3), value=-1.0))


def test_atomic_add_scatter_with_duplicates():
    n, size = 257, 13

    def body(x, r):
        i = ops.indirect_indexing(ops.load("idx", x[0]), size)
        ops.store("out", i, ops.load("src", x[0]), mode="atomic_add")

    k = spec(
        "scatter",
        (n,),
        (),
        [("loop", [("out", body, False)])],
        [buf("idx", torch.int64, (n,)), buf("src", F32, (n,)), buf("out", F32, (size,))],
        ["idx", "src", "out"],
        ["out"],
    )
    idx = torch.randint(0, size, (n,))
    src = torch.randn(n)
    base = torch.randn(size)
    out = base.clone()
    compile_one(k)(idx, src, out)
    torch.testing.assert_close(out, base.index_add(0, idx, src), atol=1e-5, rtol=1e-5)


def test_rand_randn_deterministic_and_distributed():
    n = 4096

    def body(x, r):
        seed = ops.load_seed("seed", 0)
        off = ops.index_expr(x[0], torch.int64)
        ops.store("u", x[0], ops.rand(seed, off))
        ops.store("g", x[0], ops.randn(seed, off))

    k = spec(
        "rng",
        (n,),
        (),
        [("loop", [("u", body, False)])],
        [buf("seed", torch.int64, (1,)), buf("u", F32, (n,)), buf("g", F32, (n,))],
        ["seed"],
        ["u", "g"],
    )
    ck = compile_one(k)
    seed = torch.tensor([1234])
    u1, g1, u2, g2 = (torch.empty(n) for _ in range(4))
    ck(seed, u1, g1)
    ck(seed, u2, g2)
    assert torch.equal(u1, u2) and torch.equal(g1, g2)  # same seed and offsets -> same numbers
    assert 0.0 <= u1.min() and u1.max() < 1.0
    assert abs(u1.mean().item() - 0.5) < 0.03 and abs(g1.mean().item()) < 0.08
    assert abs(g1.std().item() - 1.0) < 0.08
    ck(torch.tensor([99]), u2, g2)
    assert not torch.equal(u1, u2)


def test_a_divisor_checked_under_a_mask_along_r_is_checked_in_the_loop():
    """Fuzz seed 54522: a looped row sum of ``where(r < 3, (x + 7) // (x + s), 0)`` whose
    divisor is the same for a whole row. The division is hoisted before the r-loop; its zero
    check, under the mask ``r < 3`` that the loop defines, was hoisted with it and read the mask
    before it existed (the kernel failed to launch). The check now goes into the loop: the sums
    are eager's, and a zero divisor (s = -2 at row 2) raises eager's error."""
    import pytest

    n, m = 4, 300  # rows longer than persistent_rnumel below: an r-loop
    i64 = torch.int64

    def kernel(shift):
        def body(x, r):
            keep = ops.lt(ops.index_expr(r[0], i64), ops.constant(3, i64))

            def quotient():
                divisor = ops.index_expr(x[0] + shift, i64)
                return ops.to_dtype(ops.floordiv(ops.index_expr(x[0] + 7, i64), divisor), F32)

            value = ops.add(ops.masked(keep, quotient, 0.0), ops.load("a", x[0] * m + r[0]))
            ops.store_reduction("out", x[0], ops.reduction(F32, F32, "sum", value))

        k = spec(
            f"masked_div_{shift + 2}",
            (n,),
            (m,),
            [("loop", [("out", body, True)])],
            [buf("a", F32, (n, m)), buf("out", F32, (n,))],
            ["a"],
            ["out"],
        )
        return compile_one(k, TritonOptions(persistent_rnumel=128, looped_rblock=64))

    a, out = torch.randn(n, m), torch.empty(n)
    kernel(1)(a, out)
    rows = torch.arange(n)
    expected = a.sum(1) + 3 * torch.div(rows + 7, rows + 1, rounding_mode="floor").float()
    torch.testing.assert_close(out, expected)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        kernel(-2)(a, out)
