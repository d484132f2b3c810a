"""Integer index functions used inside loop-IR index expressions.

Index expressions are sympy expressions over non-negative integer symbols: loop variables
(``x0, x1, ...`` for pointwise dims, ``r0, r1, ...`` for reduction dims), size symbols of dynamic
shapes (``s0, s1, ...``) and indirect-index symbols (``i0, i1, ...``). Besides ordinary sympy
arithmetic (Add, Mul, Integer, Symbol, Min, Max) they may contain only the two functions below;
every code generator's printer must handle both.
"""

from __future__ import annotations

import sympy


class FloorDiv(sympy.Function):
    """``a // b`` for non-negative integers ``a`` and positive integers ``b``."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base: sympy.Expr, divisor: sympy.Expr) -> sympy.Expr | None:
        if divisor == 1:
            return base
        if base == 0:
            return sympy.Integer(0)
        if isinstance(base, sympy.Integer) and isinstance(divisor, sympy.Integer):
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        return None


class ModularIndexing(sympy.Function):
    """``(base // divisor) % modulus`` for non-negative integers."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base: sympy.Expr, divisor: sympy.Expr, modulus: sympy.Expr) -> sympy.Expr | None:
        if base == 0 or modulus == 1:
            return sympy.Integer(0)
        if (
            isinstance(base, sympy.Integer)
            and isinstance(divisor, sympy.Integer)
            and isinstance(modulus, sympy.Integer)
        ):
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        return None


def index_symbol(prefix: str, n: int) -> sympy.Symbol:
    """The canonical index symbol ``{prefix}{n}`` (integer, non-negative)."""
    return sympy.Symbol(f"{prefix}{n}", integer=True, nonnegative=True)
