"""Integer index functions used inside loop-IR index expressions.

Index expressions are sympy expressions over non-negative integer symbols: loop variables
(``x0, x1, ...`` for pointwise dims, ``r0, r1, ...`` for reduction dims), size symbols of dynamic
shapes (``s0, s1, ...``) and indirect-index symbols (``i0, i1, ...``). Besides ordinary sympy
arithmetic (Add, Mul, Integer, Symbol, Min, Max) they may contain only the two functions below;
every code generator's printer must handle both.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

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
        if isinstance(base, FloorDiv):
            # (x // a // b) % m is (x // (a * b)) % m: one form, which the simplifier's
            # recombination of FloorDiv and ModularIndexing terms recognises (merge_dims
            # composing a permuted node's unflattened index gave the nested one)
            return ModularIndexing(base.args[0], base.args[1] * divisor, modulus)
        return None


def index_symbol(prefix: str, n: int) -> sympy.Symbol:
    """The canonical index symbol ``{prefix}{n}`` (integer, non-negative)."""
    return sympy.Symbol(f"{prefix}{n}", integer=True, nonnegative=True)


#: the program of a mixed-order kernel (``KernelSpec.row_programs``): which chunk of rows it loops
#: over, the first index of its ``across_rows`` partials
ROW_PROGRAM = index_symbol("p", 0)


def innermost_symbol(ranges: Sequence[Any], prefix: str) -> sympy.Symbol | None:
    """The index symbol of the last range of size other than 1 (the fastest-varying one of the
    flattened index), or None when every range has size 1."""
    for i in reversed(range(len(ranges))):
        if sympy.sympify(ranges[i]) != 1:
            return index_symbol(prefix, i)
    return None


def contiguous_along(
    index: sympy.Expr, xvar: sympy.Symbol, rvar: sympy.Symbol, *, broadcasts: bool = True
) -> str | None:
    """``"x"`` or ``"r"``: along which of a reduction kernel's innermost dims ``index`` (an
    access that varies along both) is contiguous, x first; None when neither (or when it does
    not vary along both). ``broadcasts=False`` leaves out an access that stays put along the
    other dim (a row's mean read at every r: served from cache whichever way the kernel's block
    is laid out). The one rule behind a kernel's block layout (codegen-triton's ``_layout.py``),
    a column reduction's split (``lowering/split_reductions.py``) and keeping a row and a column
    reduction apart (``group_plan.py``)."""
    if not {xvar, rvar} <= index.free_symbols:
        return None
    step_x, step_r = unit_step(index, xvar), unit_step(index, rvar)
    if step_x == 1 and (broadcasts or step_r != 0):
        return "x"
    if step_r == 1 and (broadcasts or step_x != 0):
        return "r"
    return None


@functools.lru_cache(maxsize=1 << 12)  # a pure function; kernels of a model share addresses
def unit_step(index: sympy.Expr, var: sympy.Symbol) -> sympy.Expr:
    """How far ``index`` moves when ``var`` goes from 0 to 1 with every other index variable at
    0 (``x``/``r`` symbols, and a code generator's ``tmp`` indirect indices): the stride at the
    block's start (FloorDiv/ModularIndexing evaluate on integers)."""
    zero = {
        s: 0 for s in index.free_symbols if s.name[:1] in ("x", "r") or s.name.startswith("tmp")
    }
    moved = index.subs({**zero, var: 1}) - index.subs(zero)
    # most strides are numbers already: sympy.simplify would give the same number, slowly
    return moved if moved.is_Number else sympy.simplify(moved)
