"""Online softmax (``_online.py``): softmax, log_softmax and cross-entropy over long rows (a
language model's vocabulary: 10000-50257, looped kernels), forward and backward, against eager
on fresh random inputs in float32, bfloat16 and float16; rows of -inf, +inf and NaN; the online
form chosen for long rows and not for persistent ones. Under Triton's interpreter: few rows."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend, TritonOptions

loop_ir = pytest.importorskip("torchkiln_loop_ir")

ROWS = 3
TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-4},
    torch.bfloat16: {"atol": 2e-2, "rtol": 2e-2},
    torch.float16: {"atol": 2e-3, "rtol": 2e-3},
    torch.float64: {"atol": 1e-12, "rtol": 1e-10},
}
ONLINE = "online softmax"


def _softmax(x):
    return (torch.softmax(x, -1),)


def _log_softmax(x):
    return (torch.log_softmax(x, -1),)


def _softmax_backward(x, g):
    """The training pair: softmax and its input gradient (aten's backward op, as the
    partitioner's backward graph has it), and the same for log_softmax."""
    y, z = torch.softmax(x, -1), torch.log_softmax(x, -1)
    dx = torch.ops.aten._softmax_backward_data(g, y, -1, x.dtype)
    dz = torch.ops.aten._log_softmax_backward_data(g, z, -1, x.dtype)
    return y, dx, z, dz


def _cross_entropy(x, t):
    """Mean cross-entropy of float32 logits (as a model computes its loss) and its gradient."""
    logits = x.to(torch.promote_types(x.dtype, torch.float32))  # float64 for the reference
    loss = F.cross_entropy(logits, t)
    z = torch.log_softmax(logits, -1)
    onehot = torch.zeros_like(z).scatter(1, t[:, None], 1.0)
    grad = torch.ops.aten._log_softmax_backward_data(-onehot / x.shape[0], z, -1, z.dtype)
    return loss, grad


#: loop-ir's device split off (``split_programs=0``: only its few-outputs rule, as on the CPU):
#: on a GPU it splits these few long rows into partials and a second kernel (no online form),
#: where the interpreter keeps one looped kernel; its split is tested in loop-ir and
#: tests/test_codegen_triton_e2e.py, these tests test this backend's kernels on every device
NO_DEVICE_SPLIT = loop_ir.LoopIROptions(split_programs=0)


def _compile(fn, inputs, options=None):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    return loop_ir.compile_graph(gm, list(inputs), TritonBackend(options), NO_DEVICE_SPLIT)


def _check(cg, fn, inputs, tol):
    got, expected = cg(*inputs), fn(*inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        # NaN exactly where eager has NaN (equal_nan compares the positions)
        torch.testing.assert_close(g, e, equal_nan=True, **tol)


def _check_fp64(cg, fn, inputs):
    """Each output at most twice as far from the float64 result as eager's, plus one rounding
    of the output's dtype (at least 1e-5) at the result's scale: a backward of 16-bit rows
    computes from rounded softmax outputs in eager, from unrounded ones in the fused kernel, so
    the two differ by more than their own rounding (a bf16 log_softmax gradient of about 87 was
    0.34 off where eager's was 0.16 off: one bf16 step there is 0.5; a wrong max or sum is off
    by the values themselves)."""
    got, expected = cg(*inputs), fn(*inputs)
    wide = [i.double() if i.is_floating_point() else i for i in inputs]
    for g, e, r in zip(got, expected, fn(*wide)):
        assert g.dtype == e.dtype and g.shape == e.shape
        ours, eagers = (g.double() - r).abs(), (e.double() - r).abs()
        step = max(1e-5, torch.finfo(g.dtype).eps) if g.is_floating_point() else 1e-5
        bound = 2 * eagers.max() + step * (1 + r.abs().max())
        assert ours.max() <= bound, (ours.max(), eagers.max())


def _loops(source: str) -> int:
    """The r-loops over the row: a plain loop, or the aligned walk's three loops of one stage
    (``_aligned.py``), each starts at 0."""
    return source.count("for roffset in range(0, ")


def _rows(width, dtype, scale=4.0):
    return torch.randn(ROWS, width, dtype=dtype) * scale


@pytest.mark.parametrize(
    "width,dtype",
    [
        (10000, torch.float32),
        (30522, torch.bfloat16),
        (50257, torch.float16),
        (32000, torch.float32),
        (10000, torch.float64),
    ],
    ids=["10000-f32", "30522-bf16", "50257-f16", "32000-f32", "10000-f64"],
)
@pytest.mark.parametrize("fn", [_softmax, _log_softmax], ids=["softmax", "log_softmax"])
def test_long_rows_match_eager_and_read_the_row_twice(fn, width, dtype):
    cg = _compile(fn, (_rows(width, dtype),))
    (kernel,) = cg.kernels
    assert kernel.config.looped and ONLINE in kernel.source
    assert _loops(kernel.source) == 2, kernel.source  # max + sum online, then the outputs
    for _ in range(2):  # fresh inputs each call
        _check(cg, fn, (_rows(width, dtype),), TOL[dtype])


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"]
)
def test_backward_over_long_rows(dtype):
    width = 30522
    make = lambda: (_rows(width, dtype), torch.randn(ROWS, width, dtype=dtype))  # noqa: E731
    cg = _compile(_softmax_backward, make())
    assert any(ONLINE in k.source for k in cg.kernels)
    for _ in range(2):
        _check_fp64(cg, _softmax_backward, make())


@pytest.mark.parametrize("width", [30522, 50257])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_cross_entropy_loss_and_gradient(width, dtype):
    make = lambda: (_rows(width, dtype), torch.randint(0, width, (ROWS,)))  # noqa: E731
    cg = _compile(_cross_entropy, make())
    # loop-ir keeps x - max inline into the loss's gather: the row kernel is online
    assert any(ONLINE in k.source and _loops(k.source) == 2 for k in cg.kernels)
    for _ in range(2):
        _check_fp64(cg, _cross_entropy, make())


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.float64],
    ids=["f32", "bf16", "f64"],
)
def test_softmax_multiplies_by_the_reciprocal_of_its_sum(dtype):
    """The output loop multiplies each exp(x - max) by 1 / sum, computed once a row after the
    online loop (the sum is at least 1: its reciprocal is finite), instead of dividing each:
    as close to float64 as eager's division, rows of large and of tiny spread alike."""
    width = 20001

    def make():
        x = torch.randn(4, width, dtype=dtype) * 3
        x[1] = x[1] * 1e-3 + 50.0  # nearly equal values: a sum near the width
        x[2] = x[2] * 30.0  # one value dominates: a sum near 1
        return (x,)

    cg = _compile(_softmax, make())
    (kernel,) = cg.kernels
    src = kernel.source
    assert ONLINE in src
    inv = re.search(r"(tmp\d+) = 1\.0 / (tmp\d+)\n", src)
    assert inv is not None, src
    out_loop = src[src.rindex("for roffset in range(0, ") :]
    assert f"* {inv.group(1)}" in out_loop and " / " not in out_loop.split("\n", 1)[1]
    for _ in range(2):
        _check_fp64(cg, _softmax, make())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_persistent_softmax_multiplies_by_the_reciprocal_of_its_sum(dtype):
    """A persistent softmax (rows of 1000 in one block) multiplies by 1 / sum too: the handler
    follows max(x), x - max, exp and its sum by name. Rows of -inf, +inf and NaN (the sum is
    NaN, so are the outputs, as eager's) and rows of large and tiny spread, against eager
    and float64. A sum of exp(x - 1) (not the row's max) keeps its division."""
    width = 1000
    inf = float("inf")

    def make():
        x = torch.randn(6, width, dtype=dtype) * 3
        x[1] = x[1] * 1e-3 + 50.0
        x[2] = x[2] * 30.0
        x[3] = -inf
        x[4, 7] = inf
        x[5, 11] = float("nan")
        return (x,)

    cg = _compile(_softmax, make())
    (kernel,) = cg.kernels
    src = kernel.source
    assert not kernel.config.looped
    inv = re.search(r"(tmp\d+) = 1\.0 / (tmp\d+)\n", src)
    assert inv is not None and f"* {inv.group(1)}" in src, src
    for _ in range(2):
        x = make()
        torch.testing.assert_close(cg(*x)[0], _softmax(*x)[0], equal_nan=True)
    finite = _compile(_softmax, (make()[0][:3].clone(),))
    for _ in range(2):
        _check_fp64(finite, _softmax, (make()[0][:3].clone(),))

    def shifted(x):
        e = torch.exp(x - 1.0)
        return (e / e.sum(-1, keepdim=True),)

    cg = _compile(shifted, (torch.randn(4, width, dtype=dtype),))
    assert not re.search(r"= 1\.0 / tmp", cg.kernels[0].source)
    x = (torch.randn(4, width, dtype=dtype),)
    torch.testing.assert_close(cg(*x)[0], shifted(*x)[0])


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"]
)
@pytest.mark.parametrize("fn", [_softmax, _log_softmax], ids=["softmax", "log_softmax"])
def test_infinite_and_nan_rows_match_eager(fn, dtype):
    """A row of -inf (a fully masked attention row: NaN in eager), a half-masked row, rows with
    +inf (once, twice), a NaN, a row whose only finite value is last, and a finite row."""
    width = 10000
    inf = float("inf")

    def make():
        x = torch.randn(8, width, dtype=dtype) * 3
        x[0] = -inf
        x[1, : width // 2] = -inf
        x[2, 7] = inf
        x[3, 100] = inf
        x[3, 9000] = inf
        x[4, 5000] = float("nan")
        x[5, :-1] = -inf
        x[6, 1::2] = -inf  # -inf lanes beside finite ones in every block
        return (x,)

    cg = _compile(fn, make())
    assert ONLINE in cg.kernels[0].source
    _check(cg, fn, make(), TOL[dtype])
    got = cg(*make())[0]
    assert got[0].isnan().all() and not got[7].isnan().any()


@pytest.mark.parametrize("fn", [_softmax, _log_softmax], ids=["softmax", "log_softmax"])
def test_running_max_rising_and_falling_across_blocks(fn):
    """Small blocks (RBLOCK 256: 40 iterations) over rows whose max rises in every block, falls,
    or jumps in the last one: each raise rescales the running sum."""
    width = 10000
    options = TritonOptions(looped_rblock=256, looped_vector_scale=1)
    ramp = torch.linspace(-30.0, 30.0, width)

    def make():
        noise = torch.randn(4, width)
        x = torch.stack([ramp, -ramp, torch.zeros(width), ramp.flip(0)]) + noise
        x[2, -1] = 80.0
        return (x,)

    cg = _compile(fn, make(), options)
    assert ONLINE in cg.kernels[0].source and cg.kernels[0].config.rblock == 256
    for _ in range(2):
        _check(cg, fn, make(), TOL[torch.float32])


def test_rows_shorter_than_a_block_and_outer_softmax():
    """Forced looping (persistent_rnumel 64): rows of 100 in blocks of 128 (lanes that see no
    value), and a softmax down the columns (the transposed layout, looped)."""
    options = TritonOptions(persistent_rnumel=64)
    for fn, shape in ((_softmax, (5, 100)), (lambda x: (torch.softmax(x, 0),), (3000, 6))):
        make = lambda shape=shape: (torch.randn(*shape) * 4,)  # noqa: E731
        cg = _compile(fn, make(), options)
        assert ONLINE in cg.kernels[0].source and cg.kernels[0].config.looped
        for _ in range(2):
            _check(cg, fn, make(), TOL[torch.float32])


def test_the_decision_persistent_rows_and_the_option():
    """Persistent rows keep the plain form (the row is read once already); with
    ``online_softmax=False`` a long row takes three loops; the softmax backward's one
    reduction (sum(g * y)) is not a softmax pattern."""
    short = _compile(_softmax, (_rows(4096, torch.float32),))
    assert ONLINE not in short.kernels[0].source and not short.kernels[0].config.looped
    off = _compile(_softmax, (_rows(10000, torch.float32),), TritonOptions(online_softmax=False))
    assert ONLINE not in off.kernels[0].source and _loops(off.kernels[0].source) == 3
    _check(off, _softmax, (_rows(10000, torch.float32),), TOL[torch.float32])

    def backward_only(g, y):
        return (torch.ops.aten._softmax_backward_data(g, y, -1, torch.float32),)

    bwd = _compile(backward_only, (torch.randn(2, 10000), torch.rand(2, 10000)))
    assert all(ONLINE not in k.source for k in bwd.kernels)


def _hand_softmax(variant):
    """A softmax kernel as loop-ir schedules it (max; sum of exp; normalize), hand-built, with
    one change per ``variant`` that must (or, "plain", must not) keep the plain form."""
    from _specs import buf, spec
    from torchkiln_loop_ir.ops import ops

    f32, n, m = torch.float32, 2, 10000

    def s1(x, r):
        v = ops.load("a", x[0] * m + r[0])
        kind = "min" if variant == "min" else "max"
        ops.store_reduction("mx", x[0], ops.reduction(f32, f32, kind, v))

    def s2(x, r):
        v = ops.load("b" if variant == "other value" else "a", x[0] * m + r[0])
        d = ops.sub(v, ops.load("mx", x[0]))
        e = ops.exp(ops.mul(d, ops.constant(2.0, f32)) if variant == "scaled" else d)
        if variant == "stores per element":
            ops.store("e", x[0] * m + r[0], e)
        if variant == "two sums":
            ops.store_reduction("s2", x[0], ops.reduction(f32, f32, "sum", v))
        ops.store_reduction("sm", x[0], ops.reduction(f32, f32, "sum", e))

    def s3(x, r):
        e = ops.exp(ops.sub(ops.load("a", x[0] * m + r[0]), ops.load("mx", x[0])))
        ops.store("out", x[0] * m + r[0], ops.truediv(e, ops.load("sm", x[0])))

    outs = ["out"] + (["e"] if variant == "stores per element" else [])
    outs += ["s2"] if variant == "two sums" else []
    return spec(
        "softmax",
        (n,),
        (m,),
        [
            ("loop", [("mx", s1, True)]),
            ("loop", [("sm", s2, True)] + ([("s2", s2, True)] if variant == "two sums" else [])),
            ("loop", [("out", s3, False)]),
        ],
        [
            buf("a", f32, (n, m)),
            buf("b", f32, (n, m)),
            buf("e", f32, (n, m)),
            buf("out", f32, (n, m)),
            buf("mx", f32, (n,)),
            buf("sm", f32, (n,)),
            buf("s2", f32, (n,)),
        ],
        ["a", "b"],
        outs,
        local=("mx", "sm"),
    )


@pytest.mark.parametrize(
    "variant", ["plain", "other value", "scaled", "stores per element", "two sums", "min"]
)
def test_online_plan_takes_only_the_softmax_pattern(variant):
    from torchkiln_codegen_triton._online import OnlinePair, online_plan

    k = _hand_softmax(variant)
    plan = online_plan(k, looped=True, split=False, enabled=True)
    assert plan == (OnlinePair(0, 0) if variant == "plain" else None)
    if variant == "plain":  # nor when persistent, split or turned off
        assert online_plan(k, looped=False, split=False, enabled=True) is None
        assert online_plan(k, looped=True, split=True, enabled=True) is None
        assert online_plan(k, looped=True, split=False, enabled=False) is None


def test_a_kernel_that_cannot_take_the_planned_form_is_generated_plain(monkeypatch):
    """When generation finds the online form cannot be emitted (here: forced), the kernel is
    generated again in the plain form: three loops, eager's result."""
    from torchkiln_codegen_triton import _online

    def unavailable(*args):
        raise _online.OnlineUnavailable("forced by the test")

    monkeypatch.setattr(_online, "emit_online", unavailable)
    cg = _compile(_softmax, (_rows(10000, torch.float32),))
    assert ONLINE not in cg.kernels[0].source and _loops(cg.kernels[0].source) == 3
    _check(cg, _softmax, (_rows(10000, torch.float32),), TOL[torch.float32])
    # a name assigned in the dropped loop and used after it
    dropped = SimpleNamespace(
        init=[], prefix=[], body=["tmp3 = tl.exp(tmp2)"], suffix=["tmp9 = tl.sum(tmp3, 1)"]
    )
    with pytest.raises(_online.OnlineUnavailable):
        _online.check_absorbed(dropped, [dropped])
