"""The op table, elementwise families: unary and binary math, where/clamp/masked_fill, casts."""

from __future__ import annotations

import torch
from op_specs_base import (
    ALL,
    BF16,
    BOOL,
    F16,
    F32,
    FLOATS,
    I32,
    I64,
    INTS,
    aten,
    binary_cases,
    ge1,
    make,
    nonzero_int,
    pos,
    prims,
    small_shift,
    spec,
    unary_cases,
    unit,
)

# unary float math: name -> (fn, domain, looser tolerance)
_UNARY_FLOAT = {
    "abs": (torch.abs, None, False),
    "acos": (torch.acos, unit, True),
    "acosh": (torch.acosh, ge1, True),
    "asin": (torch.asin, unit, True),
    "asinh": (torch.asinh, None, True),
    "atan": (torch.atan, None, True),
    "atanh": (torch.atanh, unit, True),
    "ceil": (torch.ceil, None, False),
    "cos": (torch.cos, None, True),
    "cosh": (torch.cosh, None, True),
    "erf": (torch.erf, None, True),
    "erfc": (torch.erfc, None, True),
    "erfinv": (torch.erfinv, unit, True),
    "exp": (torch.exp, None, True),
    "exp2": (torch.exp2, None, True),
    "expm1": (torch.expm1, None, True),
    "floor": (torch.floor, None, False),
    "log": (torch.log, pos, True),
    "log10": (torch.log10, pos, True),
    "log1p": (torch.log1p, pos, True),
    "log2": (torch.log2, pos, True),
    "neg": (torch.neg, None, False),
    "reciprocal": (torch.reciprocal, pos, False),
    "relu": (torch.relu, None, False),
    "round": (torch.round, lambda t: t * 4, False),
    "rsqrt": (torch.rsqrt, pos, True),
    "sigmoid": (torch.sigmoid, None, True),
    "sign": (torch.sign, None, False),
    "sin": (torch.sin, None, True),
    "sinh": (torch.sinh, None, True),
    "sqrt": (torch.sqrt, pos, True),
    "square": (aten.square.default, None, False),
    "tan": (torch.tan, unit, True),
    "tanh": (torch.tanh, None, True),
    "trunc": (torch.trunc, lambda t: t * 4, False),
}
for _name, (_fn, _dom, _loose) in _UNARY_FLOAT.items():
    # int32 inputs too (promoted to float32, or kept int by abs/neg/relu/...), except where the
    # domain would reach the poles (atanh(1), erfinv(1) are infinite)
    spec(
        _name,
        _fn,
        unary_cases(_dom),
        (getattr(aten, _name),),
        dtypes=FLOATS if _name in ("atanh", "erfinv") else FLOATS + (I32,),
        tol={F32: (2e-5, 1e-5), I32: (2e-5, 1e-5)} if _loose else {},
        fx=_name == "square",
    )

spec(
    "isinf_isnan_signbit",
    lambda x: (torch.isinf(x / (x - x.round())), torch.isnan(x.log()), torch.signbit(x)),
    unary_cases(lambda t: t * 2),
    (aten.isinf, aten.isnan, aten.signbit),
)
spec(
    "abs_neg_sign_int",
    lambda x: (x.abs(), -x, x.sign(), x * x),
    unary_cases(),
    (aten.abs, aten.neg, aten.sign),
    dtypes=INTS,
)
spec("bitwise_not", torch.bitwise_not, unary_cases(), (aten.bitwise_not,), dtypes=INTS + (BOOL,))
spec("logical_not", torch.logical_not, unary_cases(), (aten.logical_not,), dtypes=ALL)

# binary math
spec(
    "add_sub_mul",
    lambda a, b: (a + b, a - b, a * b, a + 2 * b),
    binary_cases(),
    (aten.add.Tensor, aten.sub.Tensor, aten.mul),
    dtypes=FLOATS + INTS,
)
spec(
    "scalar_forms",
    lambda a: (
        aten.add.Scalar(a, 3),
        aten.sub.Scalar(a, 2),
        5 - a,
        a * 3,
        torch.rsub(a, a, alpha=2),
    ),
    unary_cases(),
    (aten.add.Scalar, aten.sub.Scalar, aten.rsub.Scalar, aten.rsub.Tensor),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec("div", lambda a, b: (a / b, a / 3.0), binary_cases(db=pos), (aten.div.Tensor,))
spec(
    "div_scalar",
    lambda a: aten.div.Scalar(a, 3.0),
    unary_cases(),
    (aten.div.Scalar,),
    decompose=False,
)


def _div_modes(name, divisor, dtypes):
    """floor and trunc division of ``a * 9`` by ``divisor(b)``."""
    spec(
        name,
        lambda a, b: (
            torch.div(a, b, rounding_mode="floor"),
            torch.div(a, b, rounding_mode="trunc"),
        ),
        binary_cases(lambda t: t * 9, divisor),
        (aten.div.Tensor_mode,),
        dtypes=dtypes,
    )


# integers by a nonzero divisor (test_special_values groups these as integer division)
_div_modes("div_modes", nonzero_int, INTS)
_div_modes("div_modes_float", pos, (F32,))
spec(
    "div_scalar_mode",
    lambda a: (
        aten.div.Scalar_mode(a, 3, rounding_mode="floor"),
        aten.div.Scalar_mode(a, 3, rounding_mode="trunc"),
    ),
    unary_cases(),
    (aten.div.Scalar_mode,),
    dtypes=INTS + (F32,),
    decompose=False,
)
spec(
    "prims_div",
    lambda a, b: prims.div(a, b),
    lambda dt: [
        (make((7, 257), dt, nonzero_int), make((7, 257), dt, nonzero_int)),
        (make((33, 7), dt, nonzero_int, transposed=True), make((33, 7), dt, nonzero_int)),
        (make((1,), dt, nonzero_int), make((1,), dt, nonzero_int)),
    ],
    (prims.div,),
    dtypes=(F32,) + INTS,
    decompose=False,
)
spec(
    "atan2_copysign",
    lambda a, b: (torch.atan2(a, b), torch.copysign(a, b)),
    binary_cases(),
    (aten.atan2, aten.copysign),
    tol={F32: (2e-5, 1e-5)},
)


def _fmod_remainder(name, divisor, **kw):
    """fmod and remainder of ``a`` by ``divisor(b)``."""
    spec(
        name,
        lambda a, b: (torch.fmod(a, b), torch.remainder(a, b)),
        binary_cases(db=divisor),
        (aten.fmod, aten.remainder),
        **kw,
    )


_fmod_remainder("fmod_remainder", pos, tol={F32: (1e-5, 1e-5)})
_fmod_remainder("fmod_remainder_int", nonzero_int, dtypes=INTS)  # integer division (special values)
spec(
    "pow",
    lambda a, b: (torch.pow(a, b), a**2, a**0.5),
    binary_cases(pos),
    (aten.pow,),
    tol={F32: (2e-5, 1e-5)},
)
spec(
    "pow_int",
    lambda a, b: (torch.pow(a, b), a**3),
    binary_cases(db=small_shift),
    (aten.pow,),
    dtypes=INTS,
)
spec(
    "maximum_minimum",
    lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)),
    binary_cases(),
    (aten.maximum, aten.minimum),
    dtypes=FLOATS + INTS + (BOOL,),
)
spec(
    "comparisons",
    lambda a, b: (a == b, a != b, a < b, a <= b, a > b, a >= b, a > 0.5),
    binary_cases(lambda t: t.round(), lambda t: t.round()),
    (aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge),
    dtypes=ALL,
)
spec(
    "logical",
    lambda a, b: (torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_xor(a, b)),
    binary_cases(lambda t: t.round(), lambda t: t.round()),
    (aten.logical_and, aten.logical_or, aten.logical_xor),
    dtypes=ALL,
)
spec(
    "bitwise",
    lambda a, b: (a & b, a | b, a ^ b),
    binary_cases(),
    (aten.bitwise_and, aten.bitwise_or, aten.bitwise_xor),
    dtypes=INTS + (BOOL,),
)
spec(
    "shifts",
    lambda a, b: (aten.bitwise_left_shift.Tensor(a, b), aten.bitwise_right_shift.Tensor(a, b)),
    binary_cases(db=small_shift),
    (aten.bitwise_left_shift, aten.bitwise_right_shift),
    dtypes=INTS,
    fx=True,
)

# where / clamp / masked_fill
spec(
    "where",
    lambda c, a, b: (
        aten.where.self(c, a, b),
        aten.where.ScalarOther(c, a, 2.0),
        aten.where.ScalarSelf(c, 3.0, b),
        aten.where.Scalar(c, 1.0, 0.0),
    ),
    lambda dt: [
        (make((7, 257), BOOL), make((7, 257), dt), make((257,), dt)),
        (make((7, 1), BOOL), make((7, 33), dt, transposed=True), make((), dt)),
        (make((1,), BOOL), make((1,), dt), make((1,), dt)),
    ],
    (aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar),
    dtypes=FLOATS + INTS,
    fx=True,
)
spec(
    "clamp",
    lambda a, lo, hi: (
        torch.clamp(a, -0.5, 0.5),
        torch.clamp(a, lo, hi),
        torch.clamp_min(a, 0.1),
        torch.clamp_max(a, 0.2),
        torch.clamp_min(a, lo),
        torch.clamp_max(a, hi),
    ),
    lambda dt: [
        (make((7, 257), dt), make((257,), dt, lambda t: -t.abs()), make((7, 1), dt, pos)),
        (make((33, 7), dt, transposed=True), make((), dt), make((), dt)),
        (make((1,), dt), make((1,), dt), make((1,), dt)),
    ],
    (
        aten.clamp.default,
        aten.clamp.Tensor,
        aten.clamp_min.default,
        aten.clamp_max.default,
        aten.clamp_min.Tensor,
        aten.clamp_max.Tensor,
    ),
    dtypes=FLOATS + INTS,
    decompose=False,
)
spec(
    "masked_fill",
    lambda x, m, v: (x.masked_fill(m, -1.5), x.masked_fill(m, v)),
    lambda dt: [
        (make((7, 257), dt), make((7, 257), BOOL), make((), dt)),
        (make((33, 7), dt, transposed=True), make((7,), BOOL), make((), dt)),
        (make((1,), dt), make((1,), BOOL), make((), dt)),
    ],
    (aten.masked_fill.Scalar, aten.masked_fill.Tensor),
    dtypes=FLOATS + INTS,
    decompose=False,
)

# casts
_CAST_TARGETS = (F32, F16, BF16, I32, I64, BOOL)
spec(
    "to_dtype",
    lambda x: tuple(x.to(d) for d in _CAST_TARGETS) + (x.to(F32) * 2,),
    unary_cases(lambda t: t * 8),
    (aten._to_copy,),
    dtypes=ALL,
    decompose=False,
)
spec(
    "convert_element_type",
    lambda x: tuple(prims.convert_element_type(x, d) for d in _CAST_TARGETS),
    unary_cases(lambda t: t * 8),
    (prims.convert_element_type,),
    dtypes=ALL,
    decompose=False,
)


def _factories(x):
    n, m = x.shape
    e = torch.empty(n, m, dtype=x.dtype).fill_(2)
    return (
        torch.arange(m, dtype=x.dtype) + x,
        torch.arange(2, m + 2, dtype=x.dtype) * x,
        torch.arange(1, 3 * m, 3, dtype=x.dtype) + x,
        e + x,
        torch.empty_like(x).fill_(1) - x,
        torch.full((n, m), 3, dtype=x.dtype) * x,
        torch.full_like(x, 7) + x,
        x.new_full((n, m), 2) * x,
        x.new_ones((n, m)) + x,
        x.new_zeros((m,)) + x,
        torch.ones(n, m, dtype=x.dtype) - x,
        torch.ones_like(x) + x,
        torch.zeros(m, dtype=x.dtype) + x,
        torch.zeros_like(x) - x,
        x.new_empty((n, m)).fill_(4) * x,
        torch.empty_strided((n, m), (1, n), dtype=x.dtype).fill_(3) + x,
    )


spec(
    "factories",
    _factories,
    lambda dt: [
        (make((7, 257), dt, lambda t: t.round()),),
        (make((1, 1), dt),),
        (make((33, 7), dt, transposed=True),),
    ],
    (
        aten.arange.default,
        aten.arange.start,
        aten.arange.start_step,
        aten.empty.memory_format,
        aten.empty_like.default,
        aten.full.default,
        aten.full_like.default,
        aten.new_full.default,
        aten.new_ones.default,
        aten.new_zeros.default,
        aten.ones.default,
        aten.ones_like.default,
        aten.zeros.default,
        aten.zeros_like.default,
        aten.new_empty.default,
        aten.fill.Scalar,
        aten.empty_strided.default,
    ),
    dtypes=(F32, BF16, I64),
    decompose=False,
)
spec(
    "iota_scalar_tensor_empty_permuted",
    lambda x: (
        prims.iota(x.shape[-1], start=3, step=2, dtype=I64, device=x.device, requires_grad=False)
        + x,
        aten.scalar_tensor.default(2.5, dtype=F32) * x,
        aten.empty_permuted.default(x.shape, (1, 0), dtype=x.dtype, device=x.device).fill_(1) + x,
    ),
    lambda dt: [(make((7, 257), dt),), (make((1, 1), dt),)],
    (prims.iota, aten.scalar_tensor.default, aten.empty_permuted.default),
    dtypes=(F32, I64),
    decompose=False,
)
