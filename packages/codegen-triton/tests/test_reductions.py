"""Reduction kernels vs eager: persistent and looped, several stages, epilogues, welford, argmax."""

import pytest
import sympy
import torch
from _specs import buf, compile_one, spec
from torchkiln_codegen_triton import TritonOptions
from torchkiln_loop_ir.ops import ops

F32 = torch.float32
LOOPED = TritonOptions(persistent_rnumel=16, looped_rblock=16)  # forces rnumel > RBLOCK loops
MODES = [pytest.param(None, id="persistent"), pytest.param(LOOPED, id="looped")]


def _row_reduce(rtype, n, m, dtype=F32, out_dtype=None, *, last=True):
    """out[i] = rtype over j of a[i, j] (last=True) or of a[j, i] (a strided reduction)."""
    out_dtype = out_dtype or dtype
    red_dtype = torch.int64 if rtype in ("argmax", "argmin") else out_dtype

    def body(x, r):
        idx = x[0] * m + r[0] if last else r[0] * n + x[0]
        v = ops.load("a", idx)
        ops.store_reduction("out", x[0], ops.reduction(red_dtype, dtype, rtype, v))

    shape = (n, m) if last else (m, n)
    return spec(
        f"red_{rtype}",
        (n,),
        (m,),
        [("loop", [("out", body, True)])],
        [buf("a", dtype, shape), buf("out", out_dtype, (n,))],
        ["a"],
        ["out"],
    )


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize(
    "rtype,ref",
    [
        ("sum", lambda a, d: a.sum(d)),
        ("max", lambda a, d: a.amax(d)),
        ("min", lambda a, d: a.amin(d)),
        ("prod", lambda a, d: a.prod(d)),
    ],
)
def test_float_reductions_last_and_strided_dim(options, rtype, ref):
    n, m = 7, 33
    a = torch.randn(n, m) * (0.2 if rtype == "prod" else 1) + (1 if rtype == "prod" else 0)
    out = torch.empty(n)
    compile_one(_row_reduce(rtype, n, m), options)(a, out)
    torch.testing.assert_close(out, ref(a, 1))
    at = torch.randn(m, n)
    compile_one(_row_reduce(rtype, n, m, last=False), options)(at, out)
    torch.testing.assert_close(out, ref(at, 0))


@pytest.mark.parametrize("options", MODES)
def test_max_propagates_nan(options):
    a = torch.randn(7, 33)
    a[2, 5] = float("nan")
    out = torch.empty(7)
    compile_one(_row_reduce("max", 7, 33), options)(a, out)
    torch.testing.assert_close(out, a.amax(1), equal_nan=True)


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("rtype", ["argmax", "argmin"])
def test_argmax_first_index_on_ties(options, rtype):
    a = torch.randint(0, 3, (9, 65)).float()  # many ties
    out = torch.empty(9, dtype=torch.int64)
    compile_one(_row_reduce(rtype, 9, 65, out_dtype=torch.int64), options)(a, out)
    torch.testing.assert_close(out, getattr(a, rtype)(1))


@pytest.mark.parametrize("options", MODES)
def test_int_bool_reductions(options):
    n, m = 5, 40
    a = torch.randint(-1000, 1000, (n, m), dtype=torch.int32)
    out = torch.empty(n, dtype=torch.int64)

    def body(x, r):
        v = ops.to_dtype(ops.load("a", x[0] * m + r[0]), torch.int64, torch.int32)
        ops.store_reduction("out", x[0], ops.reduction(torch.int64, torch.int64, "sum", v))

    k = spec(
        "isum",
        (n,),
        (m,),
        [("loop", [("out", body, True)])],
        [buf("a", torch.int32, (n, m)), buf("out", torch.int64, (n,))],
        ["a"],
        ["out"],
    )
    compile_one(k, options)(a, out)
    torch.testing.assert_close(out, a.sum(1, dtype=torch.int64))

    b = torch.rand(n, m) < 0.02
    b[0] = False
    bout = torch.empty(n, dtype=torch.bool)
    compile_one(_row_reduce("any", n, m, torch.bool), options)(b, bout)
    torch.testing.assert_close(bout, b.any(1))
    c = torch.randint(0, 2**20, (n, m), dtype=torch.int32)
    cout = torch.empty(n, dtype=torch.int32)
    compile_one(_row_reduce("xor_sum", n, m, torch.int32), options)(c, cout)
    ref = c[:, 0].clone()
    for j in range(1, m):
        ref ^= c[:, j]
    torch.testing.assert_close(cout, ref)


def _welford_spec(n, m, *, correction):
    """mean[i] and var[i] (m2 / (weight - correction)) of the rows of a float32 a[n, m]."""

    def body(x, r):
        v = ops.load("a", x[0] * m + r[0])
        mean, m2, w = ops.reduction(F32, F32, "welford_reduce", v)
        ops.store_reduction("mean", x[0], mean)
        ops.store_reduction(
            "var", x[0], ops.truediv(m2, ops.sub(w, ops.constant(float(correction), F32)))
        )

    return spec(
        "welford",
        (n,),
        (m,),
        [("loop", [("mean", body, True)])],
        [buf("a", F32, (n, m)), buf("mean", F32, (n,)), buf("var", F32, (n,))],
        ["a"],
        ["mean", "var"],
    )


@pytest.mark.parametrize("options", MODES)
def test_mean_and_welford_var(options):
    n, m = 6, 57
    k = _welford_spec(n, m, correction=1)
    a = torch.randn(n, m) * 3 + 10
    mean, var = torch.empty(n), torch.empty(n)
    compile_one(k, options)(a, mean, var)
    torch.testing.assert_close(mean, a.mean(1))
    torch.testing.assert_close(var, a.var(1))


def _softmax_spec(n, m, *, local_exp=False, lse=False, sym=None):
    rn = sym if sym is not None else m

    def ld(x, r):
        return ops.load("a", x[0] * rn + r[0])

    def s1(x, r):
        ops.store_reduction("mx", x[0], ops.reduction(F32, F32, "max", ld(x, r)))

    def e(x, r):
        return ops.exp(ops.sub(ld(x, r), ops.load("mx", x[0])))

    def s_exp(x, r):
        ops.store("e", x[0] * rn + r[0], e(x, r))

    def s2(x, r):
        v = ops.load("e", x[0] * rn + r[0]) if local_exp else e(x, r)
        ops.store_reduction("sm", x[0], ops.reduction(F32, F32, "sum", v))

    def s3(x, r):
        v = ops.load("e", x[0] * rn + r[0]) if local_exp else e(x, r)
        ops.store("out", x[0] * rn + r[0], ops.truediv(v, ops.load("sm", x[0])))

    def epi(x, r):
        ops.store("lse", x[0], ops.add(ops.log(ops.load("sm", x[0])), ops.load("mx", x[0])))

    stage2 = [("e", s_exp, False), ("sm", s2, True)] if local_exp else [("sm", s2, True)]
    stages = [("loop", [("mx", s1, True)]), ("loop", stage2), ("loop", [("out", s3, False)])]
    outs = ["out"]
    bufs = [
        buf("a", F32, (n, rn)),
        buf("out", F32, (n, rn)),
        buf("mx", F32, (n,)),
        buf("sm", F32, (n,)),
        buf("e", F32, (n, rn)),
    ]
    if lse:
        stages.append(("epilogue", [("lse", epi, False)]))
        outs.append("lse")
        bufs.append(buf("lse", F32, (n,)))
    local = {"mx", "sm", "e"}
    return spec(
        "softmax",
        (n,),
        (rn,),
        stages,
        bufs,
        ["a"],
        outs,
        local,
        size_args=[sym] if sym is not None else [],
    )


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("local_exp", [False, True], ids=["recompute", "local_buffer"])
def test_softmax_three_stages_and_epilogue(options, local_exp):
    n, m = 7, 65
    k = _softmax_spec(n, m, local_exp=local_exp, lse=True)
    a = torch.randn(n, m) * 4
    out, lse = torch.empty(n, m), torch.empty(n)
    compile_one(k, options)(a, out, lse)
    torch.testing.assert_close(out, a.softmax(1))
    torch.testing.assert_close(lse, a.logsumexp(1))


def test_symbolic_rnumel_loops_and_reuses_kernel():
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    k = _softmax_spec(3, None, sym=s0)
    ck = compile_one(k)
    assert ck.config.looped  # an unknown row length cannot be assumed to fit in registers
    for m in (1, 130, 1500):
        a = torch.randn(3, m)
        out = torch.empty(3, m)
        ck(a, out, m)
        torch.testing.assert_close(out, a.softmax(1))


def test_full_reduction_to_scalar_with_odd_size():
    def body(x, r):
        v = ops.load("a", r[0] * 2)  # every other element: a strided 1-D read
        ops.store_reduction("out", sympy.Integer(0), ops.reduction(F32, F32, "sum", v))

    k = spec(
        "total",
        (),
        (257,),
        [("loop", [("out", body, True)])],
        [buf("a", F32, (514,)), buf("out", F32, ())],
        ["a"],
        ["out"],
    )
    a = torch.randn(514)
    out = torch.empty(())
    ck = compile_one(k)
    assert ck.config.looped is False and ck.config.rblock >= 257
    ck(a, out)
    torch.testing.assert_close(out, a[::2].sum())


@pytest.mark.parametrize("m", [10000, 8193, 20480])
def test_looped_welford_sums_shifted_by_each_lanes_first_value(m):
    """A looped float32 Welford (rows past the persistent limit, with a partial last block or
    none) sums each lane's values shifted by its first one, with no divide in the loop, and
    turns the sums into (mean, m2) once after it. Rows of 8193 take the aligned walk, whose
    first block skips lanes: Welford's update per value there. Mean and variance of rows with a
    large mean (where a plain sum of squares would cancel) as near float64 as eager's float32."""
    n = 3
    k = compile_one(_welford_spec(n, m, correction=0))
    assert k.config.looped
    loop = k.source[k.source.index("for roffset") :]
    if m % 8:  # rows off a 16-byte boundary: the aligned walk skips lanes of its first block
        assert "aligned walk" in k.source and "_wshift" not in k.source
    else:
        assert "_wshift" in k.source and "_wn" not in k.source
        body = loop[: loop.index("_wweight")]  # the loop, up to the lanes' (mean, m2, weight)
        assert " / " not in body, body
    for _ in range(2):
        a = torch.randn(n, m) * 3 + 1000
        a[1] = torch.linspace(-5, 5, m)  # a trend along the row: the running mean moves
        mean, var = torch.empty(n), torch.empty(n)
        k(a, mean, var)
        ref_var, ref_mean = torch.var_mean(a.double(), 1, correction=0)
        eager_var, eager_mean = torch.var_mean(a, 1, correction=0)
        for got, eager, ref in ((mean, eager_mean, ref_mean), (var, eager_var, ref_var)):
            bound = 4 * (eager.double() - ref).abs().max() + 1e-6 * ref.abs().max()
            assert (got.double() - ref).abs().max() <= bound, (got, ref)


@pytest.mark.parametrize("m", [10000, 20480])
def test_looped_welford_counts_each_lane_after_the_loop(m):
    """The shifted sums' lane counts are worked out once after the loop (``ceil((rnumel - rbase)
    / RBLOCK)``), not counted per value in it, and stay counts whatever the sums hold: rows
    with a NaN, an inf, both infinities and a partial last block give eager's mean and
    variance (NaN and inf where eager's are), a finite row beside them its own."""
    n = 5
    k = compile_one(_welford_spec(n, m, correction=0))
    assert k.config.looped and "_wshift" in k.source
    loop = k.source[k.source.index("for roffset") :]
    body = loop[: loop.index("_wcnt")]
    assert "rmask.to" not in body, body
    for _ in range(2):
        a = torch.randn(n, m)
        a[0, m // 3] = float("nan")
        a[1, m - 1] = float("inf")  # in the partial last block when there is one
        a[2, 7], a[2, m // 2] = float("inf"), -float("inf")
        a[3, 0] = -float("inf")  # the lane's shift itself
        mean, var = torch.empty(n), torch.empty(n)
        k(a, mean, var)
        eager_var, eager_mean = torch.var_mean(a, 1, correction=0)
        torch.testing.assert_close(mean, eager_mean, equal_nan=True)
        torch.testing.assert_close(var, eager_var, equal_nan=True)
