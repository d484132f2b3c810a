"""Outer reductions (memory contiguous along x, strided along r) vs eager: the transposed block
layout and split reductions, with fused pointwise outputs, epilogues, several dtypes and sizes."""

import pytest
import torch
from _specs import buf, column_reduction, compile_one, spec
from torchkiln_codegen_triton import TritonOptions
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing
from torchkiln_loop_ir.ops import ops

F32, BF16 = torch.float32, torch.bfloat16
# small sizes split too: few programs wanted, short chunks allowed
SPLIT = TritonOptions(split_programs=64, split_min_rchunk=16, transposed_rblock=8)
NO_SPLIT = TritonOptions(split_max_chunks=0, transposed_rblock=8)
MODES = [pytest.param(SPLIT, id="split"), pytest.param(NO_SPLIT, id="nosplit")]
REF = {
    "sum": lambda t, d: t.sum(d),
    "max": lambda t, d: t.amax(d),
    "min": lambda t, d: t.amin(d),
    "prod": lambda t, d: t.prod(d),
}


def _outer(rtype, rows, cols, dtype=F32, *, keepdim=False, index=None):
    """pw[r, x] = a[r, x] * 2 (a fused pointwise output) and out[x] = rtype over r of it, in
    float32, stored as ``dtype`` (out has shape [1, cols] when keepdim)."""

    def body(x, r):
        idx = index(x, r) if index else r[0] * cols + x[0]
        v = ops.to_dtype(ops.load("a", idx), F32, dtype)
        w = ops.mul(v, ops.constant(2.0, F32))
        ops.store("pw", r[0] * cols + x[0], ops.to_dtype(w, dtype, F32))
        red = ops.reduction(F32, F32, rtype, w)
        ops.store_reduction("out", x[0], ops.to_dtype(red, dtype, F32))

    out_shape = (1, cols) if keepdim else (cols,)
    return spec(
        f"outer_{rtype}",
        (cols,),
        (rows,),
        [("loop", [("pw", body, False)])],
        [
            buf("a", dtype, (rows, cols)),
            buf("pw", dtype, (rows, cols)),
            buf("out", dtype, out_shape),
        ],
        ["a"],
        ["pw", "out"],
    )


def _check(k, rtype, rows, cols, dtype, *, keepdim=False):
    a = torch.randn(rows, cols).to(dtype)
    if rtype == "prod":  # factors 2 * a near 1: no overflow over 1000 rows
        a = (0.5 + 0.005 * torch.randn(rows, cols)).to(dtype)
    pw = torch.empty(rows, cols, dtype=dtype)
    out = torch.empty((1, cols) if keepdim else (cols,), dtype=dtype)
    k(a, pw, out)
    full = a.float() * 2
    torch.testing.assert_close(pw, full.to(dtype))
    ref = REF[rtype](full, 0).to(dtype)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == BF16 else {"atol": 1e-4, "rtol": 1e-4}
    torch.testing.assert_close(out, ref.reshape(out.shape), **tol)


@pytest.mark.parametrize("options", MODES)
@pytest.mark.parametrize("rtype", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("rows,cols", [(203, 37), (64, 64), (1000, 3), (17, 130)])
def test_outer_reduction_with_pointwise_output(options, rtype, dtype, rows, cols):
    k = compile_one(_outer(rtype, rows, cols, dtype), options)
    assert k.config.transposed and "tl.arange(0, XBLOCK)[None, :]" in k.source
    assert "block layout transposed" in k.source
    _check(k, rtype, rows, cols, dtype)


@pytest.mark.parametrize("options", MODES)
def test_keepdim_output(options):
    k = compile_one(_outer("sum", 130, 45, keepdim=True), options)
    _check(k, "sum", 130, 45, F32, keepdim=True)


def test_split_is_chosen_and_counts_programs():
    k = compile_one(_outer("sum", 203, 37), SPLIT)
    assert k.config.split >= 2 and f"def {k.function_name}_finish(" in k.source
    assert k.config.partials == (F32,)
    assert compile_one(_outer("sum", 203, 37), NO_SPLIT).config.split == 0
    # the default options split a long, narrow outer reduction, not a short one
    assert compile_one(_outer("sum", 2048, 96)).config.split >= 2
    assert compile_one(_outer("sum", 200, 96)).config.split == 0


def test_default_options_split_long_rows_vs_eager():
    k = compile_one(_outer("sum", 2048, 96, BF16))
    assert k.config.split >= 2
    _check(k, "sum", 2048, 96, BF16)


def test_inner_reduction_keeps_default_layout():
    rows, cols = 33, 7

    def body(x, r):
        ops.store_reduction(
            "out", x[0], ops.reduction(F32, F32, "sum", ops.load("a", x[0] * cols + r[0]))
        )

    k = compile_one(
        spec(
            "inner",
            (rows,),
            (cols,),
            [("loop", [("out", body, True)])],
            [buf("a", F32, (rows, cols)), buf("out", F32, (rows,))],
            ["a"],
            ["out"],
        )
    )
    assert not k.config.transposed and "tl.arange(0, XBLOCK)[:, None]" in k.source
    a = torch.randn(rows, cols)
    out = torch.empty(rows)
    k(a, out)
    torch.testing.assert_close(out, a.sum(1))


@pytest.mark.parametrize("options", MODES)
def test_gpt2_bias_grad_index(options):
    """The index of a [B, S, C] tensor viewed as [B*S, C]: C-contiguous, r = b*S + s."""
    b, s, c = 3, 40, 24

    def index(x, r):
        return x[0] + c * ModularIndexing(r[0], 1, s) + s * c * FloorDiv(r[0], s)

    k = compile_one(_outer("sum", b * s, c, index=index), options)
    assert k.config.transposed
    _check(k, "sum", b * s, c, F32)


@pytest.mark.parametrize("options", MODES)
def test_two_x_ranges_and_epilogue(options):
    """out[i, j] = sum over r of a[r, i, j] / rows + bias[i, j] (an epilogue stage after it)."""
    rows, n1, n2 = 150, 5, 9

    def red(x, r):
        v = ops.load("a", r[0] * n1 * n2 + x[0] * n2 + x[1])
        ops.store("pw", r[0] * n1 * n2 + x[0] * n2 + x[1], ops.neg(v))
        ops.store_reduction("acc", x[0] * n2 + x[1], ops.reduction(F32, F32, "sum", v))

    def epi(x, r):
        mean = ops.truediv(ops.load("acc", x[0] * n2 + x[1]), ops.constant(float(rows), F32))
        ops.store("out", x[0] * n2 + x[1], ops.add(mean, ops.load("bias", x[0] * n2 + x[1])))

    k = compile_one(
        spec(
            "mean_bias",
            (n1, n2),
            (rows,),
            [
                ("loop", [("pw", red, False), ("acc", red, True)]),
                ("epilogue", [("out", epi, False)]),
            ],
            [
                buf("a", F32, (rows, n1, n2)),
                buf("bias", F32, (n1, n2)),
                buf("pw", F32, (rows, n1, n2)),
                buf("acc", F32, (n1, n2)),
                buf("out", F32, (n1, n2)),
            ],
            ["a", "bias"],
            ["pw", "out"],
            local=["acc"],
        ),
        options,
    )
    assert k.config.transposed
    a, bias = torch.randn(rows, n1, n2), torch.randn(n1, n2)
    pw, out = torch.empty(rows, n1, n2), torch.empty(n1, n2)
    k(a, bias, pw, out)
    torch.testing.assert_close(pw, -a)
    torch.testing.assert_close(out, a.mean(0) + bias)


@pytest.mark.parametrize("options", MODES)
def test_int_sum_and_nan_max(options):
    rows, cols = 301, 19
    a = torch.randint(-1000, 1000, (rows, cols), dtype=torch.int64)
    out = torch.empty(cols, dtype=torch.int64)

    k = compile_one(column_reduction("isum", rows, cols, torch.int64), options)
    k(a, out)
    torch.testing.assert_close(out, a.sum(0))

    f = torch.randn(rows, cols)
    f[250, 3] = float("nan")
    fout = torch.empty(cols)

    k = compile_one(column_reduction("fmax", rows, cols, F32, "max"), options)
    k(f, fout)
    torch.testing.assert_close(fout, f.amax(0), equal_nan=True)


@pytest.mark.parametrize("rtype", ["argmax", "welford_reduce"])
def test_argmax_and_welford_are_transposed_but_not_split(rtype):
    rows, cols = 211, 13
    a = torch.randn(rows, cols)
    a[7] = a[100]  # ties: the first index wins

    def body(x, r):
        v = ops.load("a", r[0] * cols + x[0])
        if rtype == "argmax":
            ops.store_reduction("out", x[0], ops.reduction(torch.int64, F32, "argmax", v))
        else:
            mean, m2, _ = ops.reduction(F32, F32, "welford_reduce", v)
            ops.store_reduction("out", x[0], mean)
            ops.store_reduction("out2", x[0], ops.truediv(m2, ops.constant(float(rows), F32)))

    odt = torch.int64 if rtype == "argmax" else F32
    outs = ["out"] if rtype == "argmax" else ["out", "out2"]
    k = compile_one(
        spec(
            rtype,
            (cols,),
            (rows,),
            [("loop", [(o, body, True) for o in outs[:1]])],
            [buf("a", F32, (rows, cols)), *(buf(o, odt, (cols,)) for o in outs)],
            ["a"],
            outs,
        ),
        SPLIT,
    )
    assert k.config.transposed and k.config.split == 0
    res = [torch.empty(cols, dtype=odt) for _ in outs]
    k(a, *res)
    if rtype == "argmax":
        torch.testing.assert_close(res[0], a.argmax(0))
    else:
        torch.testing.assert_close(res[0], a.mean(0))
        torch.testing.assert_close(res[1], a.var(0, unbiased=False))


@pytest.mark.parametrize("rows", [128, 300], ids=["persistent", "looped"])
def test_few_columns_in_narrow_blocks(rows):
    """``transposed_min_programs``: 256 columns in blocks of 16 (16 programs, not 4), a Welford
    mean and variance and a sum over 128 rows (persistent) and 300 (looped), against eager."""
    cols = 256

    def body(x, r):
        v = ops.load("a", r[0] * cols + x[0])
        mean, m2, _ = ops.reduction(F32, F32, "welford_reduce", v)
        ops.store_reduction("out", x[0], mean)
        ops.store_reduction("out2", x[0], ops.truediv(m2, ops.constant(float(rows), F32)))

    options = TritonOptions(transposed_min_programs=16, split_max_chunks=0)
    k = compile_one(
        spec(
            "welford_narrow",
            (cols,),
            (rows,),
            [("loop", [("out", body, True)])],
            [buf("a", F32, (rows, cols)), buf("out", F32, (cols,)), buf("out2", F32, (cols,))],
            ["a"],
            ["out", "out2"],
        ),
        options,
    )
    assert k.config.transposed and k.config.xblock == 16 and k.config.looped == (rows > 128)
    for _ in range(2):
        a = torch.randn(rows, cols) * 3 + 1
        mean, var = torch.empty(cols), torch.empty(cols)
        k(a, mean, var)
        torch.testing.assert_close(mean, a.mean(0))
        torch.testing.assert_close(var, a.var(0, unbiased=False))


def test_two_reduction_stages_transposed():
    """A column softmax denominator: max over r, then sum of exp(a - max) over r (two loop
    stages: not split, transposed)."""
    rows, cols = 97, 21

    def mx(x, r):
        ops.store_reduction(
            "m", x[0], ops.reduction(F32, F32, "max", ops.load("a", r[0] * cols + x[0]))
        )

    def se(x, r):
        e = ops.exp(ops.sub(ops.load("a", r[0] * cols + x[0]), ops.load("m", x[0])))
        ops.store_reduction("out", x[0], ops.reduction(F32, F32, "sum", e))

    k = compile_one(
        spec(
            "colsm",
            (cols,),
            (rows,),
            [("loop", [("m", mx, True)]), ("loop", [("out", se, True)])],
            [buf("a", F32, (rows, cols)), buf("m", F32, (cols,)), buf("out", F32, (cols,))],
            ["a"],
            ["out"],
            local=["m"],
        ),
        SPLIT,
    )
    assert k.config.transposed and k.config.split == 0
    a = torch.randn(rows, cols)
    out = torch.empty(cols)
    k(a, out)
    torch.testing.assert_close(out, torch.exp(a - a.amax(0)).sum(0))


def test_every_autotune_candidate_of_a_split_outer_reduction_is_correct():
    from torchkiln_codegen_triton.autotune import candidate_configs

    k = compile_one(_outer("sum", 203, 37), SPLIT)
    cands = candidate_configs(k.config)
    assert len(cands) >= 6 and all(c.transposed and c.looped and c.split >= 2 for c in cands)
    assert {c.split for c in cands} > {k.config.split} and min(
        c.rblock for c in cands
    ) < k.config.rblock
    for cfg in cands:  # the launch parameters change, the source does not
        k.config = cfg
        _check(k, "sum", 203, 37, F32)


@pytest.mark.parametrize("rtype", ["sum", "max"])
def test_whole_tensor_reduction_splits_in_the_default_layout(rtype):
    """A loss-style reduction of everything (one x, many r) ran as one program: split, its
    chunks run in parallel. Contiguous along r: the default layout."""
    n = 1237

    def body(x, r):
        v = ops.to_dtype(ops.load("a", r[0]), F32, BF16)
        ops.store_reduction("out", 0, ops.reduction(F32, F32, rtype, v))

    k = compile_one(
        spec(
            "whole",
            (1,),
            (n,),
            [("loop", [("out", body, True)])],
            [buf("a", BF16, (n,)), buf("out", F32, ())],
            ["a"],
            ["out"],
        ),
        TritonOptions(split_min_rchunk=64, looped_rblock=32, persistent_rnumel=64),
    )
    assert not k.config.transposed and k.config.split >= 2
    a, out = torch.randn(n).to(BF16), torch.empty(())
    k(a, out)
    torch.testing.assert_close(out, REF[rtype](a.float(), 0))


@pytest.mark.parametrize("dtype", [F32, BF16], ids=["float32", "bfloat16"])
def test_a_looped_welford_takes_its_own_blocks(dtype):
    """``autotune._welford_outer_config``: a looped outer reduction whose one reduction is a
    Welford over one input (a batch norm's statistics over channels-last images) runs in blocks
    of 128 columns, a tile of 8192 (RBLOCK 64) and 64 values a thread (4 warps) once they give
    ``transposed_welford_min_programs`` programs (here 2, of 256 columns; by default 128), else
    in the outer reductions' common blocks, as it does with ``transposed_welford_xblock`` 0, with
    a second input read in full, or with a sum beside it; mean and variance of 300 rows (the
    last iteration part masked) against float64 eager, and the sum of the second input."""
    rows, cols = 300, 256

    def load(name, x, r):
        return ops.to_dtype(ops.load(name, r[0] * cols + x[0]), F32, dtype)

    def statistics(x, r, v):
        mean, m2, _ = ops.reduction(F32, F32, "welford_reduce", v)
        ops.store_reduction("out", x[0], mean)
        ops.store_reduction("out2", x[0], ops.truediv(m2, ops.constant(float(rows), F32)))

    def alone(x, r):
        statistics(x, r, load("a", x, r))

    def with_sum(x, r):  # a sum of the same input beside it
        statistics(x, r, load("a", x, r))
        ops.store_reduction("out3", x[0], ops.reduction(F32, F32, "sum", load("a", x, r)))

    def of_two(x, r):  # the statistics of a + b: two inputs read in full
        statistics(x, r, ops.add(load("a", x, r), load("b", x, r)))

    def welford(options, fn=alone):
        inputs = ["a", "b"] if fn is of_two else ["a"]
        outputs = ["out", "out2", "out3"] if fn is with_sum else ["out", "out2"]
        return compile_one(
            spec(
                f"welford_blocks_{options.transposed_welford_min_programs}_{fn.__name__}",
                (cols,),
                (rows,),
                [("loop", [("out", fn, True)])],
                [buf(n, dtype, (rows, cols)) for n in inputs]
                + [buf(n, F32, (cols,)) for n in outputs],
                inputs,
                outputs,
            ),
            options,
        )

    few = welford(TritonOptions(split_max_chunks=0))  # 2 programs of 128: too few
    assert few.config.xblock == 16 and "Welford" not in few.config.reason, few.config
    two = {"split_max_chunks": 0, "transposed_welford_min_programs": 2}
    common = {
        "off": welford(TritonOptions(transposed_welford_xblock=0, **two)),
        "with_sum": welford(TritonOptions(**two), with_sum),
        "of_two": welford(TritonOptions(**two), of_two),
    }
    for name, kernel in common.items():
        assert "Welford" not in kernel.config.reason, (name, kernel.config)
    k = welford(TritonOptions(**two))
    cfg = k.config
    assert (cfg.xblock, cfg.rblock, cfg.num_warps, cfg.looped) == (128, 64, 4, True), cfg
    assert "Welford" in cfg.reason
    for _ in range(2):
        a = (torch.randn(rows, cols) * 3 + 50).to(dtype)  # a mean far from 0: the shift matters
        b = torch.randn(rows, cols).to(dtype)
        for name, kernel in [("welford", k), *common.items()]:
            mean, var, total = torch.empty(cols), torch.empty(cols), torch.empty(cols)
            if name == "with_sum":
                kernel(a, mean, var, total)
                torch.testing.assert_close(total, a.double().sum(0).float())
            elif name == "of_two":
                kernel(a, b, mean, var)
            else:
                kernel(a, mean, var)
            exact = a.double() + b.double() if name == "of_two" else a.double()
            torch.testing.assert_close(mean, exact.mean(0).float())
            torch.testing.assert_close(
                var, exact.var(0, unbiased=False).float(), rtol=1e-4, atol=1e-4
            )
