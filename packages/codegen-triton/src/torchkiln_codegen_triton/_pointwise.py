"""Elementwise ops of the Triton ops handler: one Triton expression per op (see ops.py's list).

The math functions (``_compat.MATH_OPS``) are methods made from that list, each ``_math`` of its
name, unless the class spells one itself (``pow``, ``trunc``, ``round``).

Floats follow torch: maximum/minimum propagate NaN, floordiv/remainder round toward -inf for
integers (Triton's ``//`` and ``%`` truncate, like C).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._compat import MATH_OPS
from ._values import TritonValue
from .printer import tl_dtype

_BOOL = torch.bool


class PointwiseOps:
    """Mixin: needs ``emit``, ``join``, ``as_value``, ``constant`` and ``math`` from the handler."""

    math: dict[str, str]

    def _args(self, args: tuple[Any, ...]) -> list[TritonValue]:
        dtype = next((a.dtype for a in args if isinstance(a, TritonValue)), torch.float32)
        return [self.as_value(a, dtype) for a in args]  # type: ignore[attr-defined]

    def _op(self, template: str, *args: Any, dtype: torch.dtype | None = None) -> TritonValue:
        vals = self._args(args)
        deps, post = self.join(*vals)  # type: ignore[attr-defined]
        text = template.format(*(v.name for v in vals))
        return self.emit(text, dtype or vals[0].dtype, deps, post)  # type: ignore[attr-defined]

    def _math(self, name: str, *args: Any) -> TritonValue:
        vals = self._args(args)
        if not vals[0].dtype.is_floating_point:
            vals = [self._op("{0}.to(tl.float32)", v) for v in vals]
        return self._op(self.math[name], *vals)

    # arithmetic
    # bool + bool is logical or, bool * bool logical and (Triton computes them in int8: 1 + 1 = 2,
    # not a bool)
    def add(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        return self._op("{0} | {1}" if a.dtype == _BOOL else "{0} + {1}", a, b)

    def sub(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} - {1}", a, b)

    def mul(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        return self._op("{0} & {1}" if a.dtype == _BOOL else "{0} * {1}", a, b)

    def truediv(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        if not a.dtype.is_floating_point:
            return self._op("{0}.to(tl.float32) / {1}.to(tl.float32)", a, b, dtype=torch.float32)
        if self.is_sum_of_exp(b):  # type: ignore[attr-defined]
            # a softmax's sum of exp(x - max), at least 1 (the max's own term) or NaN: its
            # reciprocal, once a row, is finite, and a multiply a value replaces a division
            # (a few instructions: the softmax over rows of 50257 in bfloat16, 69% -> 74% of
            # the H200's bandwidth, benchmarks/gpu_walked_tail_probe.py). Within an ulp or
            # two of the quotient in float32
            return self._op("{0} * {1}", a, self._op("1.0 / {0}", b))
        return self._op("{0} / {1}", a, b)

    def _int_divisor(self, b: TritonValue) -> None:
        """An integer divisor of 0 raises in eager (CPU): the handler reports it, when it can."""
        if not b.dtype.is_floating_point:
            self.report_zero_divisor(b)  # type: ignore[attr-defined]

    def floordiv(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        if a.dtype.is_floating_point:
            return self._op("_tk_floordiv({0}, {1})", a, b)
        self._int_divisor(b)
        q = self._op("{0} // {1}", a, b)
        r = self._op("{0} % {1}", a, b)
        fix = self._op("(({0} != 0) & (({0} < 0) != ({1} < 0)))", r, b, dtype=_BOOL)
        return self._op("tl.where({2}, {0} - 1, {0})", q, b, fix)

    def mod(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        self._int_divisor(b)
        return self._op("{0} % {1}", a, b)

    def remainder(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        self._int_divisor(b)
        r = self._op("{0} % {1}", a, b)
        fix = self._op("(({0} != 0) & (({0} < 0) != ({1} < 0)))", r, b, dtype=_BOOL)
        return self._op("tl.where({2}, {0} + {1}, {0})", r, b, fix)

    def fmod(self, a: Any, b: Any) -> TritonValue:
        # Triton's % is C's: LLVM frem (fmod, exact) on floats, srem on integers, compiled and
        # in the interpreter alike
        a, b = self._args((a, b))
        self._int_divisor(b)
        return self._op("{0} % {1}", a, b)

    def neg(self, a: Any) -> TritonValue:
        return self._op("-{0}", a)

    def abs(self, a: Any) -> TritonValue:
        return self._op("tl.abs({0})", a)

    def square(self, a: Any) -> TritonValue:
        return self._op("{0} * {0}", a)

    def reciprocal(self, a: Any) -> TritonValue:
        return self._op("1.0 / {0}", a)

    def pow(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        if a.dtype.is_floating_point:
            return self._math("pow", a, b)
        return self._op("_tk_ipow({0}, {1})", a, b)

    # NaN wins; equal operands give the second one, as eager's vectorized kernels
    # (maximum(-0., 0.) is 0.; the lowering of clamp orders its operands for that)
    def maximum(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        if a.dtype.is_floating_point:
            return self._op("tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})", a, b)
        return self._op("tl.maximum({0}, {1})", a, b)

    def minimum(self, a: Any, b: Any) -> TritonValue:
        a, b = self._args((a, b))
        if a.dtype.is_floating_point:
            return self._op("tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})", a, b)
        return self._op("tl.minimum({0}, {1})", a, b)

    def sigmoid(self, a: Any) -> TritonValue:
        a = self._args((a,))[0]
        if not a.dtype.is_floating_point:
            a = self._op("{0}.to(tl.float32)", a, dtype=torch.float32)
        return self._op("1.0 / (1.0 + tl.exp(-{0}))", a)

    def relu(self, a: Any) -> TritonValue:
        return self._op("tl.where({0} < 0, 0, {0})", a)

    def sign(self, a: Any) -> TritonValue:
        a = self._args((a,))[0]
        dt = tl_dtype(a.dtype)
        if a.dtype == _BOOL:
            return a
        # sign(nan) is 0 in eager (both comparisons are false)
        return self._op(f"({{0}} > 0).to({dt}) - ({{0}} < 0).to({dt})", a)

    def _float_round(self, name: str, a: Any) -> TritonValue:
        a = self._args((a,))[0]
        if not a.dtype.is_floating_point:
            return a
        if name in ("floor", "ceil"):
            return self._op(f"tl.{name}({{0}})", a)
        return self._op(self.math[name], a)

    def floor(self, a: Any) -> TritonValue:
        return self._float_round("floor", a)

    def ceil(self, a: Any) -> TritonValue:
        return self._float_round("ceil", a)

    def trunc(self, a: Any) -> TritonValue:
        return self._float_round("trunc", a)

    def round(self, a: Any) -> TritonValue:
        return self._float_round("round", a)

    def signbit(self, a: Any) -> TritonValue:
        a = self._args((a,))[0]
        if a.dtype.is_floating_point:
            return self._op("({0} < 0) | (({0} == 0) & ((1.0 / {0}) < 0))", a, dtype=_BOOL)
        return self._op("{0} < 0", a, dtype=_BOOL)

    def isinf(self, a: Any) -> TritonValue:
        return self._op('tl.abs({0}) == float("inf")', a, dtype=_BOOL)

    def isnan(self, a: Any) -> TritonValue:
        return self._op("{0} != {0}", a, dtype=_BOOL)

    # logic and bits
    def logical_and(self, a: Any, b: Any) -> TritonValue:
        return self._op("({0} != 0) & ({1} != 0)", a, b, dtype=_BOOL)

    def logical_or(self, a: Any, b: Any) -> TritonValue:
        return self._op("({0} != 0) | ({1} != 0)", a, b, dtype=_BOOL)

    def logical_xor(self, a: Any, b: Any) -> TritonValue:
        return self._op("({0} != 0) ^ ({1} != 0)", a, b, dtype=_BOOL)

    def logical_not(self, a: Any) -> TritonValue:
        return self._op("{0} == 0", a, dtype=_BOOL)

    def bitwise_and(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} & {1}", a, b)

    def bitwise_or(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} | {1}", a, b)

    def bitwise_xor(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} ^ {1}", a, b)

    def bitwise_not(self, a: Any) -> TritonValue:
        a = self._args((a,))[0]
        if a.dtype == _BOOL:
            return self._op("{0} == 0", a, dtype=_BOOL)
        return self._op("~{0}", a)

    def bitwise_left_shift(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} << {1}", a, b)

    def bitwise_right_shift(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} >> {1}", a, b)

    # comparisons and selection
    def eq(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} == {1}", a, b, dtype=_BOOL)

    def ne(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} != {1}", a, b, dtype=_BOOL)

    def lt(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} < {1}", a, b, dtype=_BOOL)

    def le(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} <= {1}", a, b, dtype=_BOOL)

    def gt(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} > {1}", a, b, dtype=_BOOL)

    def ge(self, a: Any, b: Any) -> TritonValue:
        return self._op("{0} >= {1}", a, b, dtype=_BOOL)

    def where(self, c: Any, a: Any, b: Any) -> TritonValue:
        c = self.as_value(c, _BOOL)  # type: ignore[attr-defined]
        a, b = self._args((a, b))
        return self._op("tl.where({0}, {1}, {2})", c, a, b, dtype=a.dtype)


def _math_method(name: str) -> Callable[..., TritonValue]:
    def method(self: PointwiseOps, *args: Any) -> TritonValue:
        return self._math(name, *args)

    method.__name__, method.__qualname__ = name, f"PointwiseOps.{name}"
    return method


for _name in MATH_OPS:
    if _name not in vars(PointwiseOps):
        setattr(PointwiseOps, _name, _math_method(_name))
