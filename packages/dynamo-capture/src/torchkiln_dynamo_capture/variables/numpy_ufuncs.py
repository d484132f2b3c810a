"""numpy's ufuncs (``np.exp``, ``np.add``, ``np.less``...) and the ndarray operators as torch
operations: part of capture's numpy table (numpy_table.py holds the other functions).

A ufunc computes in its loop's dtypes, which numpy itself resolves from its operands' dtypes
(``ufunc.resolve_dtypes``): int64 / int64 loops in float64, a Python float with a float32 array in
float32 (NEP 50's weak Python scalars), int64 < float32 compares in float64. Each operand is cast
to its loop dtype, the torch function runs on them, and the result is cast to the loop's output
dtype; so torch's own promotion (int / int -> float32) never decides a numpy result.
"""

from __future__ import annotations

import operator

import torch

from .numpy_table import as_tensor, matmul

try:
    import numpy as np
except ImportError:  # the optional "numpy" extra
    np = None


def _sign(x):
    # numpy's sign of NaN is NaN (torch's is 0)
    return torch.where(torch.isnan(x), x, torch.sign(x)) if x.is_floating_point() else torch.sign(x)


def _positive(x):
    return x.clone()  # numpy's +a is a new array


def _by_zero_is_zero(fn):
    """numpy's integer ``//``, ``%`` and fmod by zero give 0 (with a warning); torch raises."""

    def divide(x, y):
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            return fn(x, y)
        zero = y == 0
        return torch.where(
            zero, torch.zeros_like(x), fn(x, torch.where(zero, torch.ones_like(y), y))
        )

    divide.__name__ = fn.__name__
    return divide


def _matmul(x, y):
    return matmul(x, y, x.dtype)


def _ufuncs() -> dict:
    """numpy's ufunc -> the torch function of its operands (already in the loop's dtypes)."""
    if np is None:
        return {}
    return {
        np.add: torch.add, np.subtract: torch.sub, np.multiply: torch.mul,
        np.true_divide: torch.true_divide, np.floor_divide: _by_zero_is_zero(torch.floor_divide),
        np.remainder: _by_zero_is_zero(torch.remainder), np.fmod: _by_zero_is_zero(torch.fmod),
        np.power: torch.pow,
        np.float_power: torch.pow, np.negative: torch.neg, np.positive: _positive,
        np.absolute: torch.abs, np.fabs: torch.abs, np.sign: _sign, np.square: torch.square,
        np.sqrt: torch.sqrt, np.reciprocal: torch.reciprocal,
        np.exp: torch.exp, np.exp2: torch.exp2, np.expm1: torch.expm1, np.log: torch.log,
        np.log2: torch.log2, np.log10: torch.log10, np.log1p: torch.log1p,
        np.logaddexp: torch.logaddexp, np.logaddexp2: torch.logaddexp2,
        np.sin: torch.sin, np.cos: torch.cos, np.tan: torch.tan, np.arcsin: torch.asin,
        np.arccos: torch.acos, np.arctan: torch.atan, np.arctan2: torch.atan2,
        np.sinh: torch.sinh, np.cosh: torch.cosh, np.tanh: torch.tanh,
        np.arcsinh: torch.asinh, np.arccosh: torch.acosh, np.arctanh: torch.atanh,
        np.hypot: torch.hypot, np.deg2rad: torch.deg2rad, np.rad2deg: torch.rad2deg,
        np.degrees: torch.rad2deg, np.radians: torch.deg2rad,
        np.floor: torch.floor, np.ceil: torch.ceil, np.trunc: torch.trunc, np.rint: torch.round,
        np.maximum: torch.maximum, np.minimum: torch.minimum, np.fmax: torch.fmax,
        np.fmin: torch.fmin, np.copysign: torch.copysign, np.signbit: torch.signbit,
        np.isfinite: torch.isfinite, np.isnan: torch.isnan, np.isinf: torch.isinf,
        np.logical_and: torch.logical_and, np.logical_or: torch.logical_or,
        np.logical_xor: torch.logical_xor, np.logical_not: torch.logical_not,
        np.bitwise_and: torch.bitwise_and, np.bitwise_or: torch.bitwise_or,
        np.bitwise_xor: torch.bitwise_xor, np.invert: torch.bitwise_not,
        np.left_shift: torch.bitwise_left_shift, np.right_shift: torch.bitwise_right_shift,
        np.equal: torch.eq, np.not_equal: torch.ne, np.less: torch.lt,
        np.less_equal: torch.le, np.greater: torch.gt, np.greater_equal: torch.ge,
        np.matmul: _matmul,
    }  # fmt: skip


#: numpy's ufuncs this table has
UFUNCS = _ufuncs()

#: Python's operators on an ndarray: numpy's ufunc behind each
OPERATOR_UFUNCS = (
    {
        operator.add: np.add,
        operator.sub: np.subtract,
        operator.mul: np.multiply,
        operator.truediv: np.true_divide,
        operator.floordiv: np.floor_divide,
        operator.mod: np.remainder,
        operator.pow: np.power,
        operator.matmul: np.matmul,
        operator.and_: np.bitwise_and,
        operator.or_: np.bitwise_or,
        operator.xor: np.bitwise_xor,
        operator.lshift: np.left_shift,
        operator.rshift: np.right_shift,
        operator.lt: np.less,
        operator.le: np.less_equal,
        operator.gt: np.greater,
        operator.ge: np.greater_equal,
        operator.eq: np.equal,
        operator.ne: np.not_equal,
        operator.neg: np.negative,
        operator.pos: np.positive,
        operator.abs: np.absolute,
        operator.invert: np.invert,
    }  # fmt: skip
    if np is not None
    else {}
)


def loop_dtypes(ufunc, stand_ins: list) -> tuple[np.dtype, ...]:
    """The dtypes numpy's ``ufunc`` loops in for these operands (real numpy values of the same
    dtypes), outputs last: Python scalars are weak, as numpy 2 treats them."""
    operands = tuple(
        type(v)
        if type(v) in (int, float, complex)
        else np.result_type(v)
        if not isinstance(v, (list, tuple))
        else np.asarray(v).dtype
        for v in stand_ins
    )
    return ufunc.resolve_dtypes(operands + (None,) * ufunc.nout)


def run_ufunc(fn, loop: tuple, operands: list):
    """``fn`` on ``operands`` cast to their loop dtypes; the result in the output's."""
    cast = [as_tensor(x, dt) for x, dt in zip(operands, loop)]
    result = fn(*cast)
    return result.to(loop[len(operands)])


__all__ = ["OPERATOR_UFUNCS", "UFUNCS", "loop_dtypes", "run_ufunc"]
