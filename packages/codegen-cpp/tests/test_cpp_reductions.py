"""Reduction kernels against eager torch: last dim and dim 0, arg-reductions with ties and NaN,
Welford variance, a two-reduction softmax, full reductions, bool/int reductions."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torchkiln_codegen_cpp import CppBackend
from torchkiln_loop_ir.ops import ops

SHAPES = [(1, 1), (7, 257), (65, 300)]  # the last runs in parallel


def _row_reduce(kit, name, m, n, rtype, dim):
    """out[i] = reduce(a, dim); ``dim`` 1: contiguous rows; ``dim`` 0: a strided column walk."""

    def load(x, r):
        return ops.load("a", x[0] * n + r[0] if dim == 1 else r[0] * n + x[0])

    xs, rs = (m, n) if dim == 1 else (n, m)
    if rtype == "mean":

        def body(x, r):
            ops.store_reduction(
                "acc", x[0], ops.reduction(torch.float32, torch.float32, "sum", load(x, r))
            )

        def epilogue(x, r):
            ops.store(
                "out",
                x[0],
                ops.truediv(ops.load("acc", x[0]), ops.constant(float(rs), torch.float32)),
            )

        stages = [("loop", [("acc", body, True)]), ("epilogue", [("out", epilogue, False)])]
        return kit.spec(
            name,
            (xs,),
            (rs,),
            stages,
            [kit.buf("a", (m, n)), kit.buf("acc", (xs,)), kit.buf("out", (xs,))],
            ("a",),
            ("out",),
            local=("acc",),
        )
    out_dtype = torch.int64 if rtype.startswith("arg") else torch.float32

    def body(x, r):
        ops.store_reduction("out", x[0], ops.reduction(out_dtype, torch.float32, rtype, load(x, r)))

    return kit.spec(
        name,
        (xs,),
        (rs,),
        [("loop", [("out", body, True)])],
        [kit.buf("a", (m, n)), kit.buf("out", (xs,), out_dtype)],
        ("a",),
        ("out",),
    )


REFS = {
    "sum": lambda a, d: a.sum(d),
    "prod": lambda a, d: a.prod(d),
    "max": lambda a, d: a.amax(d),
    "min": lambda a, d: a.amin(d),
    "mean": lambda a, d: a.mean(d),
    "argmax": lambda a, d: a.argmax(d),
    "argmin": lambda a, d: a.argmin(d),
}


@pytest.fixture(scope="module")
def row_kernels(kit):
    specs, keys = [], []
    for rtype in REFS:
        for dim in (0, 1):
            for m, n in SHAPES:
                keys.append((rtype, dim, m, n))
                specs.append(_row_reduce(kit, f"{rtype}_{dim}_{m}_{n}", m, n, rtype, dim))
    return dict(zip(keys, CppBackend().compile_kernels(specs)))


@pytest.mark.parametrize("rtype", list(REFS))
@pytest.mark.parametrize("dim", [0, 1])
def test_reduction(row_kernels, rtype, dim):
    for m, n in SHAPES:
        a = torch.randn(m, n)
        if rtype == "prod":
            a = 1 + 0.01 * a  # keep the product finite
        if rtype.startswith("arg") and m * n > 4:
            a[0, :] = a[0, 0]  # ties: the first index wins
            a[:, 0] = a[0, 0]
            a[2, 3] = math.nan  # NaN counts as the extreme
        expected = REFS[rtype](a, dim)
        out = torch.empty_like(expected)
        row_kernels[(rtype, dim, m, n)](a, out)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_amax_propagates_nan(row_kernels):
    a = torch.randn(7, 257)
    a[3, 100] = math.nan
    out = torch.empty(7)
    row_kernels[("max", 1, 7, 257)](a, out)
    torch.testing.assert_close(out, a.amax(1), equal_nan=True)
    assert math.isnan(out[3])


def test_welford_var_mean_and_softmax(kit):
    m, n = 33, 301

    def welford(x, r):
        mean, m2, weight = ops.reduction(
            torch.float32, torch.float32, "welford_reduce", ops.load("a", x[0] * n + r[0])
        )
        ops.store_reduction("mean", x[0], mean)
        ops.store_reduction("m2", x[0], m2)
        ops.store_reduction("w", x[0], weight)

    def var(x, r):
        w = ops.load("w", x[0])
        ops.store(
            "var",
            x[0],
            ops.truediv(ops.load("m2", x[0]), ops.sub(w, ops.constant(1.0, torch.float32))),
        )

    var_k = kit.spec(
        "welford",
        (m,),
        (n,),
        [("loop", [("mean", welford, True)]), ("epilogue", [("var", var, False)])],
        [kit.buf(b, (m,)) for b in ("m2", "w", "var", "mean")] + [kit.buf("a", (m, n))],
        ("a",),
        ("mean", "var"),
        local=("m2", "w"),
    )

    def amax(x, r):
        ops.store_reduction(
            "amax",
            x[0],
            ops.reduction(torch.float32, torch.float32, "max", ops.load("a", x[0] * n + r[0])),
        )

    def exp(x, r):  # a pointwise local buffer in stage 2, read again by stage 3: recomputed
        v = ops.sub(ops.load("a", x[0] * n + r[0]), ops.load("amax", x[0]))
        ops.store("e", x[0] * n + r[0], ops.exp(v))

    def denom(x, r):
        v = ops.load("e", x[0] * n + r[0])
        ops.store_reduction("sum", x[0], ops.reduction(torch.float32, torch.float32, "sum", v))

    def normalize(x, r):
        v = ops.truediv(ops.load("e", x[0] * n + r[0]), ops.load("sum", x[0]))
        ops.store("out", x[0] * n + r[0], v)

    softmax_k = kit.spec(
        "softmax",
        (m,),
        (n,),
        [
            ("loop", [("amax", amax, True)]),
            ("loop", [("e", exp, False), ("sum", denom, True)]),
            ("loop", [("out", normalize, False)]),
        ],
        [kit.buf("a", (m, n)), kit.buf("amax", (m,)), kit.buf("sum", (m,))]
        + [kit.buf("e", (m, n)), kit.buf("out", (m, n))],
        ("a",),
        ("out",),
        local=("amax", "sum", "e"),
    )
    kv, ks = CppBackend().compile_kernels([var_k, softmax_k])
    a = torch.randn(m, n) * 3 + 1
    mean, var_out = torch.empty(m), torch.empty(m)
    kv(a, mean, var_out)
    torch.testing.assert_close(var_out, a.var(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mean, a.mean(1), rtol=1e-5, atol=1e-5)
    out = torch.empty(m, n)
    ks(a, out)
    torch.testing.assert_close(out, torch.softmax(a, 1))


@pytest.mark.parametrize("n", [1000, 3 * 17 * 1009])  # the second splits across threads
def test_full_reduction_and_int_bool_reductions(kit, n):

    def total(x, r):
        ops.store_reduction(
            "total", 0, ops.reduction(torch.float64, torch.float64, "sum", ops.load("d", r[0]))
        )

    def any_(x, r):
        v = ops.load("b", x[0] * 7 + r[0])
        ops.store_reduction("any", x[0], ops.reduction(torch.bool, torch.bool, "any", v))

    def xor(x, r):
        v = ops.load("i", x[0] * 7 + r[0])
        ops.store_reduction("xor", x[0], ops.reduction(torch.int32, torch.int32, "xor_sum", v))

    def isum(x, r):  # int32 summed into int64, as torch.sum does
        v = ops.to_dtype(ops.load("i", x[0] * 7 + r[0]), torch.int64)
        ops.store_reduction("isum", x[0], ops.reduction(torch.int64, torch.int64, "sum", v))

    def imax(x, r):
        v = ops.load("i", x[0] * 7 + r[0])
        ops.store_reduction("imax", x[0], ops.reduction(torch.int32, torch.int32, "max", v))

    ks = CppBackend().compile_kernels(
        [
            kit.spec(
                "total",
                (),
                (n,),
                [("loop", [("total", total, True)])],
                [kit.buf("d", (n,), torch.float64), kit.buf("total", (), torch.float64)],
                ("d",),
                ("total",),
            ),
            kit.spec(
                "any",
                (9,),
                (7,),
                [("loop", [("any", any_, True)])],
                [kit.buf("b", (9, 7), torch.bool), kit.buf("any", (9,), torch.bool)],
                ("b",),
                ("any",),
            ),
            kit.spec(
                "xor",
                (9,),
                (7,),
                [
                    ("loop", [("xor", xor, True)]),
                    ("loop", [("isum", isum, True)]),
                    ("loop", [("imax", imax, True)]),
                ],
                [
                    kit.buf("i", (9, 7), torch.int32),
                    kit.buf("xor", (9,), torch.int32),
                    kit.buf("isum", (9,), torch.int64),
                    kit.buf("imax", (9,), torch.int32),
                ],
                ("i",),
                ("xor", "isum", "imax"),
            ),
        ]
    )
    d = torch.randn(n, dtype=torch.float64)
    total_out = torch.empty((), dtype=torch.float64)
    ks[0](d, total_out)
    torch.testing.assert_close(total_out, d.sum())
    assert ("omp parallel for simd reduction(+:" in ks[0].source) == (n > 16384)
    b = torch.rand(9, 7) < 0.1
    b[0] = False
    any_out = torch.empty(9, dtype=torch.bool)
    ks[1](b, any_out)
    assert torch.equal(any_out, b.any(1))
    i = torch.randint(-1000, 1000, (9, 7), dtype=torch.int32)
    xor_out, isum_out, imax_out = (
        torch.empty(9, dtype=torch.int32),
        torch.empty(9, dtype=torch.int64),
        torch.empty(9, dtype=torch.int32),
    )
    ks[2](i, xor_out, isum_out, imax_out)
    expected_xor = i[:, 0].clone()
    for j in range(1, 7):
        expected_xor ^= i[:, j]
    assert torch.equal(xor_out, expected_xor)
    assert torch.equal(isum_out, i.sum(1))
    assert torch.equal(imax_out, i.amax(1))


def test_two_reduction_dims_argmax_flat_index_and_half_sum(kit):
    m, p, q = 5, 6, 7

    def argmax(x, r):
        v = ops.load("a", x[0] * p * q + r[0] * q + r[1])
        ops.store_reduction("am", x[0], ops.reduction(torch.int64, torch.float32, "argmax", v))

    def total(x, r):
        v = ops.load("a", r[0] * p * q + r[1])
        ops.store_reduction("tot", 0, ops.reduction(torch.float32, torch.float32, "sum", v))

    def half_sum(x, r):
        v = ops.load("h", x[0] * q + r[0])
        ops.store_reduction("hs", x[0], ops.reduction(torch.float16, torch.float16, "sum", v))

    ks = CppBackend().compile_kernels(
        [
            kit.spec("argmax2", (m,), (p, q), [("loop", [("am", argmax, True)])],
                     [kit.buf("a", (m, p, q)), kit.buf("am", (m,), torch.int64)], ("a",), ("am",)),
            kit.spec("total2", (), (m, p * q), [("loop", [("tot", total, True)])],
                     [kit.buf("a", (m, p, q)), kit.buf("tot", ())], ("a",), ("tot",)),
            kit.spec("half_sum", (m,), (q,), [("loop", [("hs", half_sum, True)])],
                     [kit.buf("h", (m, q), torch.float16), kit.buf("hs", (m,), torch.float16)],
                     ("h",), ("hs",)),
        ]
    )  # fmt: skip
    a = torch.randn(m, p, q)
    a[1] = 0.5  # all ties: index 0
    a[2, 3, 4] = 100.0
    am = torch.empty(m, dtype=torch.int64)
    ks[0](a, am)
    assert torch.equal(am, a.reshape(m, -1).argmax(1))
    tot = torch.empty(())
    ks[1](a, tot)
    torch.testing.assert_close(tot, a.sum())
    h = torch.randn(m, q).half()
    hs = torch.empty(m, dtype=torch.float16)
    ks[2](h, hs)
    torch.testing.assert_close(hs, h.sum(1), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32])
def test_vectorized_max_min_nan_inf_and_full_reduction(dtype):
    """The omp-simd max/min path (compare-and-select + NaN flag) against eager amax/amin,
    per row and over everything, with NaN and +-inf placed at the ends of rows."""
    import torchkiln_loop_ir as loop_ir
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x):
        return x.amax(-1), x.amin(-1), x.amax(), x.amin()

    if dtype.is_floating_point:
        x = torch.randn(9, 1003).to(dtype)
        x[1, 0] = math.nan
        x[2, -1] = math.nan
        x[3, :] = -math.inf
        x[4, 500] = math.inf
    else:
        x = torch.randint(-1000, 1000, (9, 1003), dtype=dtype)
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(x)
    cg = loop_ir.compile_graph(gm, [x], CppBackend())
    for got, expected in zip(cg(x), fn(x)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
    if dtype.is_floating_point:
        y = torch.randn(40000).to(dtype)
        y[-1] = math.nan  # the full reductions are split across threads: the flag must combine
        gm = make_fx(lambda t: (t.amax(), t.amin()), decomposition_table=loop_ir.decompositions())(
            y
        )
        out = loop_ir.compile_graph(gm, [y], CppBackend())(y)
        assert all(torch.isnan(t) for t in out)


def test_strided_reductions_vectorized_across_x():
    """Reductions over dim 0 of a 3-d tensor: the innermost x-loop is the simd one (each lane a
    whole r-loop); sums, NaN-propagating amax, first-index argmax and a two-pass var."""
    import torchkiln_loop_ir as loop_ir
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x):
        return x.sum(0), x.amax(0), x.argmax(0), x.var(0), torch.softmax(x, 0)

    x = torch.randn(37, 5, 131)
    x[3, 2, 7] = math.nan
    x[10, 0, 3] = math.inf
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(x)
    cg = loop_ir.compile_graph(gm, [x], CppBackend())
    # the simd pragma is on an x-loop (its own, or the parallel one when the x dims merged)
    assert any(
        re.search(r"omp (parallel for )?simd\n\s*for \(int64_t x", k.source)
        and "r0++) {\n" in k.source
        for k in cg.kernels
    )
    x = torch.randn(37, 5, 131)  # fresh values, same shapes
    x[5, 1, 9] = math.nan
    for got, expected in zip(cg(x), fn(x)):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4, equal_nan=True)
