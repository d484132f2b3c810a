"""Pointwise kernels vs eager: broadcasting, strides, dtypes, math, symbolic sizes."""

from pathlib import Path

import numpy as np
import pytest
import sympy
import torch
from _specs import buf, compile_one, spec
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing
from torchkiln_loop_ir.ops import ops

F32 = torch.float32


def test_broadcast_add_mul():
    def body(x, r):
        a = ops.load("a", x[0] * 65 + x[1])
        b = ops.load("b", x[1])
        c = ops.load("c", x[0])
        ops.store(
            "out", x[0] * 65 + x[1], ops.add(ops.mul(a, b), ops.sub(c, ops.constant(1.5, F32)))
        )

    k = spec(
        "bcast",
        (33, 65),
        (),
        [("loop", [("out", body, False)])],
        [
            buf("a", F32, (33, 65)),
            buf("b", F32, (65,)),
            buf("c", F32, (33, 1)),
            buf("out", F32, (33, 65)),
        ],
        ["a", "b", "c"],
        ["out"],
    )
    ck = compile_one(k)
    a, b, c = torch.randn(33, 65), torch.randn(65), torch.randn(33, 1)
    out = torch.empty(33, 65)
    ck(a, b, c, out)
    torch.testing.assert_close(out, a * b + (c - 1.5))
    assert ck.path and Path(ck.path).read_text() == ck.source


def test_transposed_strided_input_and_size_one():
    # out[i, j] = a.T[i, j] where a is (65, 33) contiguous: a strided read; a size-1 middle dim
    def body(x, r):
        ops.store("out", x[0] * 65 + x[2], ops.neg(ops.load("a", x[2] * 33 + x[0])))

    k = spec(
        "tr",
        (33, 1, 65),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", F32, (65, 33)), buf("out", F32, (33, 1, 65))],
        ["a"],
        ["out"],
    )
    a = torch.randn(65, 33)
    out = torch.empty(33, 1, 65)
    compile_one(k)(a, out)
    torch.testing.assert_close(out, -a.t().unsqueeze(1))


def test_floordiv_modular_indexing_and_offset():
    # a view a[1:].reshape(...) read through FloorDiv/ModularIndexing of a flat index
    def body(x, r):
        flat = x[0]
        idx = 1 + FloorDiv(flat, 7) * 7 + ModularIndexing(flat, 1, 7)
        ops.store("out", flat, ops.exp(ops.load("a", idx)))

    k = spec(
        "fdmod",
        (49,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", F32, (50,)), buf("out", F32, (49,))],
        ["a"],
        ["out"],
    )
    a = torch.randn(50)
    out = torch.empty(49)
    compile_one(k)(a, out)
    torch.testing.assert_close(out, a[1:].exp())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_storage(dtype):
    def body(x, r):
        a = ops.to_dtype(ops.load("a", x[0]), F32, dtype)
        b = ops.to_dtype(ops.load("b", x[0]), F32, dtype)
        ops.store("out", x[0], ops.to_dtype(ops.mul(ops.add(a, b), a), dtype, F32))

    k = spec(
        "lp",
        (257,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", dtype, (257,)), buf("b", dtype, (257,)), buf("out", dtype, (257,))],
        ["a", "b"],
        ["out"],
    )
    a, b = torch.randn(257, dtype=dtype), torch.randn(257, dtype=dtype)
    out = torch.empty(257, dtype=dtype)
    compile_one(k)(a, b, out)
    ref = ((a.float() + b.float()) * a.float()).to(dtype)
    torch.testing.assert_close(out, ref)


def test_int_and_bool_storage():
    def body(x, r):
        a = ops.load("a", x[0])
        b = ops.load("b", x[0])
        m = ops.load("m", x[0])
        ops.store("fd", x[0], ops.floordiv(a, b))
        ops.store("rem", x[0], ops.remainder(a, b))
        ops.store("mx", x[0], ops.where(m, ops.maximum(a, b), ops.bitwise_xor(a, b)))
        ops.store("cmp", x[0], ops.logical_and(ops.gt(a, b), ops.logical_not(m)))
        ops.store(
            "wide",
            x[0],
            ops.mul(ops.to_dtype(a, torch.int64, torch.int32), ops.constant(2**33, torch.int64)),
        )

    n = 257
    k = spec(
        "ints",
        (n,),
        (),
        [("loop", [(o, body, False)]) for o in ["fd"]],
        [
            buf("a", torch.int32, (n,)),
            buf("b", torch.int32, (n,)),
            buf("m", torch.bool, (n,)),
            buf("fd", torch.int32, (n,)),
            buf("rem", torch.int32, (n,)),
            buf("mx", torch.int32, (n,)),
            buf("cmp", torch.bool, (n,)),
            buf("wide", torch.int64, (n,)),
        ],
        ["a", "b", "m"],
        ["fd", "rem", "mx", "cmp", "wide"],
    )
    a = torch.randint(-50, 50, (n,), dtype=torch.int32)
    b = torch.randint(1, 9, (n,), dtype=torch.int32) * torch.where(torch.rand(n) < 0.5, -1, 1).int()
    m = torch.rand(n) < 0.5
    outs = [torch.empty(n, dtype=torch.int32) for _ in range(3)] + [
        torch.empty(n, dtype=torch.bool),
        torch.empty(n, dtype=torch.int64),
    ]
    compile_one(k)(a, b, m, *outs)
    torch.testing.assert_close(outs[0], torch.div(a, b, rounding_mode="floor"))
    torch.testing.assert_close(outs[1], torch.remainder(a, b))
    torch.testing.assert_close(outs[2], torch.where(m, torch.maximum(a, b), a ^ b))
    torch.testing.assert_close(outs[3], (a > b) & ~m)
    torch.testing.assert_close(outs[4], a.long() * 2**33)


_UNARY = {
    "exp": (torch.exp, (-3, 3)),
    "log": (torch.log, (0.1, 5)),
    "sqrt": (torch.sqrt, (0, 5)),
    "rsqrt": (torch.rsqrt, (0.1, 5)),
    "sin": (torch.sin, (-4, 4)),
    "tanh": (torch.tanh, (-5, 5)),
    "sigmoid": (torch.sigmoid, (-8, 8)),
    "erf": (torch.erf, (-3, 3)),
    "erfinv": (torch.erfinv, (-0.99, 0.99)),
    "expm1": (torch.expm1, (-2, 2)),
    "log1p": (torch.log1p, (-0.5, 3)),
    "atan": (torch.atan, (-10, 10)),
    "asin": (torch.asin, (-0.99, 0.99)),
    "acos": (torch.acos, (-0.99, 0.99)),
    "sinh": (torch.sinh, (-3, 3)),
    "cosh": (torch.cosh, (-3, 3)),
    "asinh": (torch.asinh, (-5, 5)),
    "atanh": (torch.atanh, (-0.9, 0.9)),
    "round": (torch.round, (-5, 5)),
    "trunc": (torch.trunc, (-5, 5)),
    "floor": (torch.floor, (-5, 5)),
    "sign": (torch.sign, (-2, 2)),
    "relu": (torch.relu, (-2, 2)),
    "log10": (torch.log10, (0.1, 5)),
    "tan": (torch.tan, (-1.2, 1.2)),
}


def _unary_kernel(names):
    def make(name):
        def body(x, r):
            ops.store(name, x[0], getattr(ops, name)(ops.load("a", x[0])))

        return body

    return spec(
        "unary",
        (257,),
        (),
        [("loop", [(n, make(n), False) for n in names])],
        [buf("a", F32, (257,))] + [buf(n, F32, (257,)) for n in names],
        ["a"],
        list(names),
    )


@pytest.mark.parametrize("group", [list(_UNARY)[i::3] for i in range(3)])
def test_unary_math(group):
    # one input range for all ops of a group: clamp to each op's domain inside the reference
    ck = compile_one(_unary_kernel(group))
    u = torch.rand(257)
    u[::17] = 0.5  # exact halves exercise round-half-even
    for name in group:
        fn, (lo, hi) = _UNARY[name]
        a = lo + (hi - lo) * u
        if name == "round":
            a = torch.round(a * 2) / 2
        outs = [torch.empty(257) for _ in group]
        ck(a, *outs)
        torch.testing.assert_close(
            outs[group.index(name)],
            fn(a),
            atol=2e-5,
            rtol=2e-5,
            msg=lambda m, name=name: f"{name}: {m}",
        )


def test_binary_math_and_nan_semantics():
    def body(x, r):
        a, b = ops.load("a", x[0]), ops.load("b", x[0])
        ops.store("atan2", x[0], ops.atan2(a, b))
        ops.store("pow", x[0], ops.pow(ops.abs(a), b))
        ops.store("mx", x[0], ops.maximum(a, b))
        ops.store("fmod", x[0], ops.fmod(a, b))
        ops.store("isnan", x[0], ops.isnan(a))

    names = ["atan2", "pow", "mx", "fmod", "isnan"]
    k = spec(
        "bin",
        (257,),
        (),
        [("loop", [("atan2", body, False)])],
        [buf("a", F32, (257,)), buf("b", F32, (257,))]
        + [buf(n, torch.bool if n == "isnan" else F32, (257,)) for n in names],
        ["a", "b"],
        names,
    )
    a, b = torch.randn(257) * 3, torch.randn(257) * 3
    a[::13] = float("nan")
    outs = [torch.empty(257, dtype=torch.bool if n == "isnan" else F32) for n in names]
    compile_one(k)(a, b, *outs)
    refs = [torch.atan2(a, b), a.abs() ** b, torch.maximum(a, b), torch.fmod(a, b), a.isnan()]
    for n, o, ref in zip(names, outs, refs):
        torch.testing.assert_close(
            o, ref, atol=1e-5, rtol=1e-4, equal_nan=True, msg=lambda m, n=n: f"{n}: {m}"
        )


def test_symbolic_sizes_one_kernel_many_shapes():
    s0 = sympy.Symbol("s0", integer=True, positive=True)

    def body(x, r):
        i = x[0] * 7 + x[1]
        ops.store("out", i, ops.add(ops.load("a", i), ops.index_expr(x[0] + s0, F32)))

    k = spec(
        "sym",
        (s0, 7),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", F32, (s0, 7)), buf("out", F32, (s0, 7))],
        ["a"],
        ["out"],
        size_args=[s0],
    )
    ck = compile_one(k)
    for n in (1, 5, 37):
        a = torch.randn(n, 7)
        out = torch.empty(n, 7)
        ck(a, out, n)
        torch.testing.assert_close(out, a + (torch.arange(n)[:, None] + n).float())


def test_scalar_kernel_and_size_symbol_value():
    # a 0-d output from a 0-d input and a size symbol used as a value
    s0 = sympy.Symbol("s0", integer=True, positive=True)

    def body(x, r):
        v = ops.load("a", sympy.Integer(0))
        ops.store(
            "out",
            sympy.Integer(0),
            ops.mul(ops.add(v, ops.index_expr(s0, F32)), ops.constant(2.0, F32)),
        )

    k = spec(
        "scalar",
        (),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", F32, ()), buf("out", F32, ())],
        ["a"],
        ["out"],
        size_args=[s0],
    )
    ck = compile_one(k)
    for n in (1, 6):
        a, out = torch.randn(()), torch.empty(())
        ck(a, out, n)
        torch.testing.assert_close(out, (a + n) * 2)


def _shifted(other):
    """out[i] = x[i - 2] for i >= 2, else ``other``: a load under a mask (a padded read)."""

    def body(x, r):
        i = ops.index_expr(x[0] - 2, torch.int32)
        inside = ops.ge(i, ops.constant(0, torch.int32))
        v = ops.masked(inside, lambda: ops.load("a", x[0] - 2), other)
        ops.store("out", x[0], ops.mul(v, ops.constant(2.0, F32)))

    k = spec(
        f"shift_{str(other).replace('-', 'm')}",
        (37,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", torch.bfloat16, (37,)), buf("out", F32, (37,))],
        ["a"],
        ["out"],
    )
    return compile_one(k)


@pytest.mark.parametrize("other", [0.0, -0.0, float("-inf"), 1.5], ids=str)
def test_a_masked_load_is_not_selected_again(other):
    """A load under a mask gives 0 where the mask is off (``other=0``): ``masked`` with 0 as its
    other value returns it as it is (a direct convolution's taps: one select fewer per tap and
    element); any other value (-0.0 too) keeps the select. Values against eager either way."""
    ck = _shifted(other)
    a = torch.randn(37, dtype=torch.bfloat16)
    out = torch.empty(37)
    ck(a, out)
    expected = torch.full((37,), other)
    expected[2:] = a[:-2].float()
    torch.testing.assert_close(out, expected * 2)
    kernel = ck.source[ck.source.index("def tk_") :]  # not the prelude's helpers
    if other == 0.0 and str(other) == "0.0":
        assert "tl.where" not in kernel
        assert torch.equal(out[:2].sign(), torch.zeros(2))  # +0.0, as the select gave
    else:
        assert "tl.where" in kernel
        if other == 0.0:  # -0.0: the select keeps its sign
            assert torch.equal(torch.signbit(out[:2]), torch.ones(2, dtype=torch.bool))


def test_negative_zero_constants_are_written_from_their_bits():
    """Triton 3.6 folds any float constant equal to 0 into +0.0, so ``tl.full([1], -0.0, ...)``
    lost its sign on the GPU machine (test_a_masked_load_is_not_selected_again[-0.0] failed there
    against eager); -0.0 is its bits bitcast, +0.0 stays a plain literal."""
    from torchkiln_codegen_triton._values import full

    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        assert "bitcast=True" in full(-0.0, dtype), dtype
        assert "bitcast" not in full(0.0, dtype) and "bitcast" not in full(-1.5, dtype)


@pytest.mark.parametrize("op", ["expm1", "log1p", "tanh", "sinh", "asinh", "atanh"])
def test_math_helpers_keep_small_arguments_low_bits(op):
    """The math ops that libdevice gives on a GPU and the prelude's ``_tk_*`` stand in for under
    the interpreter stay within a few float32 ulps of the float64 result where ``exp(x) - 1`` or
    ``log(1 + x)`` would cancel (about 1e-5 relative near |x| = 0.01: the fuzzer's ``1 /
    tanh(x)`` read 5e-6 off in float64, seed 780148), at fresh random magnitudes from 1e-8 to
    10 (atanh inside (-1, 1), log1p above -1)."""
    n = 4096

    def body(x, r):
        ops.store("out", x[0], getattr(ops, op)(ops.load("a", x[0])))

    k = spec(
        op,
        (n,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", F32, (n,)), buf("out", F32, (n,))],
        ["a"],
        ["out"],
    )
    ck = compile_one(k)
    sign = torch.where(torch.rand(n) < 0.5, -1.0, 1.0)
    a = sign * torch.pow(10.0, torch.empty(n).uniform_(-8, 1))
    if op == "atanh":
        a = a.clamp(-0.999, 0.999)
    if op == "log1p":
        a = a.clamp(min=-0.999)
    out = torch.empty(n)
    ck(a, out)
    ref = getattr(torch, op)(a.double())
    rel = ((out.double() - ref).abs() / ref.abs()).max().item()
    eager = ((getattr(torch, op)(a).double() - ref).abs() / ref.abs()).max().item()
    assert rel <= max(8 * eager, 6e-7), (rel, eager)


def test_erf_of_two_ranges_is_within_two_ulp_and_keeps_special_values():
    """``TritonOptions.erf_two_ranges``: a float32 erf from two polynomials (coefficients inline,
    the upper range through one exp2) is within 2 ulp of float64's erf over a dense grid of
    [-6, 6], fresh random points and tiny values (libdevice's and eager's: about 1), keeps
    erf(+-0.) = +-0., erf(+-inf) = +-1 and NaN; and is what the kernel calls."""
    from torchkiln_codegen_triton import TritonOptions

    n = 8192
    k = spec(
        "erf",
        (n,),
        (),
        [
            (
                "loop",
                [("out", lambda x, r: ops.store("out", x[0], ops.erf(ops.load("a", x[0]))), False)],
            )
        ],
        [buf("a", F32, (n,)), buf("out", F32, (n,))],
        ["a"],
        ["out"],
    )
    ck = compile_one(k, TritonOptions(erf_two_ranges=True))
    assert "_tk_erf_two_ranges(" in ck.source[ck.source.index("def tk_") :]
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 0.921875])
    tiny = torch.logspace(-38, 0, 512, dtype=torch.float64).float()
    rest = n - special.numel() - 2 * tiny.numel() - 4096
    a = torch.cat([special, tiny, -tiny, torch.linspace(-6, 6, 4096), torch.randn(rest) * 2])
    out = torch.empty(n)
    ck(a, out)
    want = torch.erf(a.double())
    finite = a.isfinite()
    ulp = torch.from_numpy(np.spacing(want[finite].abs().float().numpy())).double()
    err = (out[finite].double() - want[finite]).abs() / ulp
    assert err.max() <= 2.0, (err.max(), a[finite][err.argmax()])
    assert torch.equal(out[:4], torch.tensor([0.0, -0.0, 1.0, -1.0]))
    assert torch.equal(out[:2].signbit(), torch.tensor([False, True]))
    assert out[4].isnan()
