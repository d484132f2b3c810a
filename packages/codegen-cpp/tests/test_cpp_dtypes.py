"""Storage and arithmetic of int, bool, half and bfloat16 values against eager torch."""

from __future__ import annotations

import pytest
import torch
from torchkiln_codegen_cpp import CppBackend
from torchkiln_loop_ir.ops import ops

N = 257
INT_OPS = {
    "add": torch.add,
    "mul": torch.mul,
    "sub": torch.sub,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "remainder": torch.remainder,
    "maximum": torch.maximum,
    "bitwise_xor": torch.bitwise_xor,
    "bitwise_and": torch.bitwise_and,
    "bitwise_left_shift": torch.bitwise_left_shift,
}
INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
FLOAT16S = [torch.float16, torch.bfloat16]


def _binary(kit, name, op, dtype, out_dtype=None):
    def body(x, r):
        ops.store("out", x[0], getattr(ops, op)(ops.load("a", x[0]), ops.load("b", x[0])))

    return kit.spec(
        name,
        (N,),
        (),
        [("loop", [("out", body, False)])],
        [
            kit.buf("a", (N,), dtype),
            kit.buf("b", (N,), dtype),
            kit.buf("out", (N,), out_dtype or dtype),
        ],
        ("a", "b"),
        ("out",),
    )


@pytest.fixture(scope="module")
def kernels(kit):
    specs = {}
    for dtype in INT_DTYPES:
        for op in INT_OPS:
            specs[(op, dtype)] = _binary(kit, f"{op}_{str(dtype)[6:]}", op, dtype)
    for dtype in FLOAT16S:
        specs[("add", dtype)] = _binary(kit, f"add_{str(dtype)[6:]}", "add", dtype)
        specs[("mul", dtype)] = _binary(kit, f"mul_{str(dtype)[6:]}", "mul", dtype)

        def chain(x, r, dtype=dtype):  # half in, float math, rounding to half, half out
            a = ops.to_dtype(ops.load("a", x[0]), torch.float32)
            t = ops.to_dtype(ops.exp(a), dtype)  # the rounding eager does between two ops
            ops.store("out", x[0], ops.add(t, ops.load("b", x[0])))

        specs[("chain", dtype)] = kit.spec(
            f"chain_{str(dtype)[6:]}",
            (N,),
            (),
            [("loop", [("out", chain, False)])],
            [kit.buf("a", (N,), dtype), kit.buf("b", (N,), dtype), kit.buf("out", (N,), dtype)],
            ("a", "b"),
            ("out",),
        )

        def to_f32(x, r, dtype=dtype):
            ops.store("out", x[0], ops.to_dtype(ops.load("a", x[0]), torch.float32, dtype))

        specs[("to_f32", dtype)] = kit.spec(
            f"tof32_{str(dtype)[6:]}",
            (N,),
            (),
            [("loop", [("out", to_f32, False)])],
            [kit.buf("a", (N,), dtype), kit.buf("out", (N,))],
            ("a",),
            ("out",),
        )

        def from_f32(x, r, dtype=dtype):
            ops.store("out", x[0], ops.to_dtype(ops.load("a", x[0]), dtype, torch.float32))

        specs[("from_f32", dtype)] = kit.spec(
            f"fromf32_{str(dtype)[6:]}",
            (N,),
            (),
            [("loop", [("out", from_f32, False)])],
            [kit.buf("a", (N,)), kit.buf("out", (N,), dtype)],
            ("a",),
            ("out",),
        )

        def bitcast(x, r, dtype=dtype):
            ops.store("out", x[0], ops.to_dtype_bitcast(ops.load("a", x[0]), torch.int16, dtype))

        specs[("bitcast", dtype)] = kit.spec(
            f"bitcast_{str(dtype)[6:]}",
            (N,),
            (),
            [("loop", [("out", bitcast, False)])],
            [kit.buf("a", (N,), dtype), kit.buf("out", (N,), torch.int16)],
            ("a",),
            ("out",),
        )
    for op in ("logical_and", "logical_xor", "bitwise_or", "eq"):
        specs[(op, torch.bool)] = _binary(kit, f"{op}_bool", op, torch.bool)

    def int_to_float(x, r):
        ops.store(
            "out",
            x[0],
            ops.truediv(
                ops.to_dtype(ops.load("a", x[0]), torch.float32), ops.constant(3, torch.float32)
            ),
        )

    specs[("int_to_float", torch.int32)] = kit.spec(
        "int_to_float",
        (N,),
        (),
        [("loop", [("out", int_to_float, False)])],
        [kit.buf("a", (N,), torch.int32), kit.buf("out", (N,))],
        ("a",),
        ("out",),
    )
    return dict(zip(specs, CppBackend().compile_kernels(list(specs.values()))))


def _ints(dtype, low, high):
    return torch.randint(low, high, (N,), dtype=dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("op", list(INT_OPS))
def test_int_ops_wrap_like_torch(kernels, op, dtype):
    info = torch.iinfo(dtype)
    low, high = max(info.min, -200), min(info.max, 200)
    a, b = _ints(dtype, low, high), _ints(dtype, low, high)
    if op in ("floordiv", "remainder"):
        b[b == 0] = 3
    if op == "bitwise_left_shift":
        b = _ints(dtype, 0, 7)
    expected = INT_OPS[op](a, b)
    out = torch.empty_like(expected)
    kernels[(op, dtype)](a, b, out)
    assert torch.equal(out, expected), (a, b, out, expected)


@pytest.mark.parametrize("dtype", FLOAT16S, ids=lambda d: str(d)[6:])
def test_half_like_storage(kernels, dtype):
    a, b = torch.randn(N).to(dtype), torch.randn(N).to(dtype)
    a[:4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")]).to(dtype)
    a[4:8] = torch.tensor([6e-8, -3e-5, 65504.0, 1e-40]).to(dtype)  # subnormals and extremes
    for op, ref in (("add", torch.add), ("mul", torch.mul)):
        out = torch.empty(N, dtype=dtype)
        kernels[(op, dtype)](a, b, out)
        torch.testing.assert_close(out, ref(a, b), rtol=0, atol=0, equal_nan=True)
    out = torch.empty(N, dtype=dtype)
    kernels[("chain", dtype)](a, b, out)
    torch.testing.assert_close(out, torch.exp(a) + b, rtol=0, atol=0, equal_nan=True)
    f32 = torch.empty(N)
    kernels[("to_f32", dtype)](a, f32)
    torch.testing.assert_close(f32, a.float(), rtol=0, atol=0, equal_nan=True)
    wide = torch.randn(N) * 1000
    wide[:6] = torch.tensor(
        [1e-6, -1e-7, 1e6, 70000.0, 65519.0, 65520.0]
    )  # round to subnormal / to inf
    narrow = torch.empty(N, dtype=dtype)
    kernels[("from_f32", dtype)](wide, narrow)
    torch.testing.assert_close(narrow, wide.to(dtype), rtol=0, atol=0)
    bits = torch.empty(N, dtype=torch.int16)
    kernels[("bitcast", dtype)](narrow, bits)
    assert torch.equal(bits, narrow.view(torch.int16))


@pytest.mark.parametrize("op", ["logical_and", "logical_xor", "bitwise_or", "eq"])
def test_bool_ops(kernels, op):
    a, b = torch.rand(N) < 0.5, torch.rand(N) < 0.5
    expected = getattr(torch, op)(a, b)
    out = torch.empty(N, dtype=torch.bool)
    kernels[(op, torch.bool)](a, b, out)
    assert torch.equal(out, expected)


def test_int_to_float(kernels):
    a = _ints(torch.int32, -(10**6), 10**6)
    out = torch.empty(N)
    kernels[("int_to_float", torch.int32)](a, out)
    torch.testing.assert_close(out, a.float() / 3)


@pytest.mark.parametrize("op", ["floordiv", "remainder"])
def test_int_division_by_zero_and_min_by_minus_one_do_not_crash(kernels, op):
    """A zero divisor raises eager's RuntimeError('ZeroDivisionError') after the kernel ran (no
    SIGFPE; the other lanes are exact); the minimum by -1 wraps as in eager."""
    a, b = _ints(torch.int64, -200, 200), _ints(torch.int64, -200, 200)
    b[::3] = 0
    a[1], b[1] = torch.iinfo(torch.int64).min, -1
    out = torch.empty(N, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="^ZeroDivisionError$"):
        kernels[(op, torch.int64)](a, b, out)
    ok = b != 0
    assert torch.equal(out[ok], INT_OPS[op](a[ok], b[ok]))
    b[b == 0] = 7  # the flag was taken: a call without zero divisors returns
    kernels[(op, torch.int64)](a, b, out)
    assert torch.equal(out, INT_OPS[op](a, b))
