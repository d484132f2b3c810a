"""Float values computed from sizes (a ``SymFloat`` over the input sizes), as kernel arithmetic.

A training batch norm updates its running variance with the unbiased factor ``n / (n - 1)``,
``n`` the count of reduced elements: under a symbolic batch size that factor is a ``SymFloat``,
an expression of the size symbols such as ``FloatTrueDiv(IntTrueDiv(8*s0*s1, 8), ... - 1.0)``.
The wrapper and kernels already compute the integer size expressions themselves, so such a value
needs no place in memory: ``FloatSizeExpr.emit`` writes it as ops (integer parts through
``ops.index_expr``, divisions and float constants as float64 ops, the result cast to the
operand's dtype), as eager computes it in Python's double before the tensor op casts it.

Float values read from a tensor (``.item()``) have unbacked symbols and stay refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloatTrueDiv, IntTrueDiv, ToFloat

from .errors import Unlowerable
from .ops import ops

_WIDE = torch.float64


@dataclass(frozen=True)
class FloatSizeExpr:
    """A float value of the size symbols (a lowered ``SymFloat`` node)."""

    expr: sympy.Expr

    def emit(self, dtype: torch.dtype) -> Any:
        """The value as ops, in ``dtype``."""
        value = _emit(self.expr)
        return value if dtype == _WIDE else ops.to_dtype(value, dtype, _WIDE)


def _emit(e: sympy.Expr) -> Any:
    if e.is_number:
        return ops.constant(float(e), _WIDE)
    if e.is_integer and not e.atoms(IntTrueDiv, FloatTrueDiv, ToFloat, sympy.Float):
        return ops.index_expr(e, _WIDE)  # a polynomial of sizes: index arithmetic, then float
    if isinstance(e, (IntTrueDiv, FloatTrueDiv)):
        return ops.truediv(_emit(e.args[0]), _emit(e.args[1]))
    if isinstance(e, ToFloat):
        return _emit(e.args[0])
    if isinstance(e, sympy.Add):
        out = _emit(e.args[0])
        for term in e.args[1:]:
            out = ops.add(out, _emit(term))
        return out
    if isinstance(e, sympy.Mul):
        out = _emit(e.args[0])
        for factor in e.args[1:]:
            out = ops.mul(out, _emit(factor))
        return out
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp != 0:
        base = _emit(e.base)
        out = base
        for _ in range(abs(int(e.exp)) - 1):
            out = ops.mul(out, base)
        return out if e.exp > 0 else ops.truediv(ops.constant(1.0, _WIDE), out)
    raise Unlowerable(f"a float size expression loop-ir cannot write as ops: {e}")


__all__ = ["FloatSizeExpr"]
