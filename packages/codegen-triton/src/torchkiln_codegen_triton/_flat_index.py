"""Addresses written in the kernel's flat ``xindex``/``rindex`` where that makes them linear.

A kernel recovers each range variable from the flat index of its block (``r0 = rindex // 512``,
``r1 = rindex % 512``) and an address then recombines them (``768*r1 + 393216*r0``): a division
and a remainder per element, and an address whose contiguity Triton's analysis cannot see
through them. For data laid out in the order of the ranges that is just ``768*rindex``.
``FlatIndex.rewrite`` substitutes each variable by its quotient/remainder of the flat index and
lets loop-ir's ``simplify_index`` merge quotient and remainder pairs back; the result is used
only when no division of a flat index is left. Where one is, each side is tried alone: the r
variables merged into ``rindex`` while the x variables stay as they were, or the other way
(otherwise the address stays as it was).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import sympy
from torchkiln_loop_ir import FloorDiv, ModularIndexing, index_symbol

# loop-ir's own index simplifier (not exported: its module is not yet type-checked, which
# loop-ir's exports must be); the same rules the scheduler's fusion checks rely on
from torchkiln_loop_ir._simplify import simplify_index

XFLAT = sympy.Symbol("xindex", integer=True, nonnegative=True)
RFLAT = sympy.Symbol("rindex", integer=True, nonnegative=True)


def _split(
    ranges: Sequence[sympy.Expr], prefix: str, flat: sympy.Symbol
) -> dict[sympy.Symbol, sympy.Expr]:
    """Each range variable as a function of the flat index (kernel.py's ``_range_vars``)."""
    out: dict[sympy.Symbol, sympy.Expr] = {}
    inner = sympy.Integer(1)
    for i in reversed(range(len(ranges))):
        size = sympy.sympify(ranges[i])
        if size != 1:
            q = FloorDiv(flat, inner) if inner != 1 else flat
            out[index_symbol(prefix, i)] = ModularIndexing(flat, inner, size) if i > 0 else q
        inner = inner * size
    return out


def _total(ranges: Sequence[sympy.Expr]) -> sympy.Expr:
    total = sympy.Integer(1)
    for r in ranges:
        total = total * sympy.sympify(r)
    return total


class FlatIndex:
    """Rewrites addresses of one kernel (see the module docstring); results are cached."""

    def __init__(self, xranges: Sequence[sympy.Expr], rranges: Sequence[sympy.Expr]) -> None:
        self._subs = {**_split(xranges, "x", XFLAT), **_split(rranges, "r", RFLAT)}
        self._ranges = {XFLAT: _total(xranges), RFLAT: _total(rranges)}
        # only kernels with a variable recovered by // or %: one range per side needs nothing
        self._useful = any(not isinstance(v, sympy.Symbol) for v in self._subs.values())
        self._key = (tuple(self._subs.items()), tuple(self._ranges.items()))

    def rewrite(self, index: sympy.Expr) -> sympy.Expr:
        if not self._useful or not (index.free_symbols & self._subs.keys()):
            return index
        return _rewritten(self._key, index)


# A pure function of the kernel's ranges and the address, kept across kernels: the kernels of a
# model share their ranges and addresses (every layer's), and each rewrite is a sympy
# substitution and simplification.
@functools.lru_cache(maxsize=1 << 14)
def _rewritten(key: tuple[tuple, tuple], index: sympy.Expr) -> sympy.Expr:
    subs, ranges = dict(key[0]), dict(key[1])
    whole = _merged(index, subs, ranges)
    if whole is not None:
        return whole
    # one side at a time, where the other keeps a division: a channels-last reduction's
    # ``x1 + 256*r1 + 14336*r0 + 401408*x0`` is ``x1 + 256*rindex + 401408*x0`` (its x
    # variables, ``xindex % 256`` and ``xindex // 256``, stay as they were)
    out = index
    for flat in (RFLAT, XFLAT):
        side = {v: e for v, e in subs.items() if flat in e.free_symbols}
        divides = any(not isinstance(e, sympy.Symbol) for e in side.values())  # else a rename
        merged = _merged(out, side, ranges) if divides and out.free_symbols & side.keys() else None
        if merged is not None:
            out = merged
    return out


def _merged(
    index: sympy.Expr, subs: dict[sympy.Symbol, sympy.Expr], ranges: dict[sympy.Symbol, sympy.Expr]
) -> sympy.Expr | None:
    """``index`` with ``subs`` substituted and simplified, or None when a division of a flat
    index is left."""
    flat = simplify_index(index.subs(subs, simultaneous=True), ranges)
    divided = any(
        f.args[0].free_symbols & {XFLAT, RFLAT} for f in flat.atoms(FloorDiv, ModularIndexing)
    )
    return None if divided else flat
