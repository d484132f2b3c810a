"""Simplifying index expressions given the ranges of their loop variables.

Flattening and unflattening iteration spaces writes ``FloorDiv``/``ModularIndexing`` of linear
sums; with variable ranges most of them collapse back (``ModularIndexing(257*x0 + x1, 1, 257)``
is ``x1`` when ``x1 < 257``). Equal indices must print equal for the fusion legality check.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import sympy

from .indexing import FloorDiv, ModularIndexing


def _linear_terms(expr: sympy.Expr) -> list[tuple[sympy.Expr, sympy.Expr]] | None:
    """``expr`` as [(coefficient, term)], or None when a coefficient is not an integer."""
    out = []
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer:
            return None
        out.append((coeff, rest))
    return out


def _max_value(terms, ranges: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr | None:
    """The largest value of a sum of non-negative terms (None: unknown, or a negative term)."""
    total = sympy.Integer(0)
    for coeff, term in terms:
        if coeff < 0:
            return None
        if term == 1:
            total += coeff
        elif term in ranges and sympy.sympify(ranges[term]).is_Integer:
            total += coeff * (sympy.sympify(ranges[term]) - 1)
        elif isinstance(term, ModularIndexing) and term.args[2].is_Integer and term.args[2] > 0:
            total += coeff * (term.args[2] - 1)  # Python's % of a positive modulus: [0, mod)
        elif isinstance(term, FloorDiv) and term.args[1].is_Integer and term.args[1] > 0:
            inner = _linear_terms(term.args[0])
            mx = None if inner is None else _max_value(inner, ranges)
            if mx is None:
                return None
            total += coeff * (mx // term.args[1])
        else:
            return None
    return total


def _recombine(expr: sympy.Expr) -> sympy.Expr:
    """``k*c*FloorDiv(e, c) + k*ModularIndexing(e', 1, c)`` is ``k*e`` when ``e - e'`` is a
    multiple of ``c`` (then ``e' % c == e % c``): a view that splits a dimension and one that
    merges it back write exactly this (mlp_mixer's ``(2, 64, 32)`` buffer read as ``(128, 32)``:
    the GELU after the bias add was not fused, its read index did not print as the write's)."""
    terms = _linear_terms(expr)
    if terms is None:
        return expr
    terms = list(terms)
    changed = True
    while changed:
        changed = False
        for i, (ca, ta) in enumerate(terms):
            if not isinstance(ta, FloorDiv) or not ta.args[1].is_Integer or ca % ta.args[1] != 0:
                continue
            e, c = ta.args
            k = ca // c
            for j, (cb, tb) in enumerate(terms):
                if (
                    cb != k
                    or not isinstance(tb, ModularIndexing)
                    or tb.args[1] != 1
                    or tb.args[2] != c
                ):
                    continue
                diff = _linear_terms(e - tb.args[0])
                if diff is None or any(d % c != 0 for d, _ in diff):
                    continue
                terms = [t for n, t in enumerate(terms) if n not in (i, j)]
                terms += _linear_terms(k * e) or [(k, e)]
                changed = True
                break
            if changed:
                break
    return sympy.expand(sum((c * t for c, t in terms), sympy.Integer(0)))


def _split_div(base, divisor, ranges):
    """``base // divisor`` as a plain sum when the low part is provably below ``divisor``."""
    if not divisor.is_Integer:
        return None
    terms = _linear_terms(base)
    if terms is None:
        return None
    hi = [(c, t) for c, t in terms if c % divisor == 0]
    lo = [(c, t) for c, t in terms if c % divisor != 0]
    mx = _max_value(lo, ranges)
    if mx is None or mx >= divisor:
        return None
    return sum((c // divisor * t for c, t in hi), sympy.Integer(0))


def _reduce_div(base, divisor, ranges):
    """``(base', divisor')`` with ``base // divisor == base' // divisor'``, the low terms dropped:
    for a factor m of ``divisor`` that divides every other coefficient, terms whose sum stays in
    ``[0, m)`` never carry (``(256*x0 + x1) // 4352`` is ``x0 // 17`` for ``x1 < 256``: the int64
    division per element had kept vit's GELU kernel from vectorizing). None: nothing drops."""
    if not divisor.is_Integer or divisor <= 1:
        return None
    terms = _linear_terms(base)
    if terms is None:
        return None
    d = int(divisor)
    for m in sorted({sympy.igcd(d, int(c)) for c, _ in terms} - {1}, reverse=True):
        hi = [(c, t) for c, t in terms if c % m == 0]
        lo = [(c, t) for c, t in terms if c % m != 0]
        mx = _max_value(lo, ranges)
        if lo and mx is not None and mx < m:
            return sum((c // m * t for c, t in hi), sympy.Integer(0)), sympy.Integer(d // m)
    return None


def _drop_whole_turns(base: sympy.Expr, div: sympy.Expr, mod: sympy.Expr) -> sympy.Expr:
    """``base`` without its terms whose coefficient is a multiple of ``div * mod``: such a term
    ``c*t`` adds ``(c/div)*t`` to ``base // div``, a multiple of ``mod``, so
    ``(base // div) % mod`` does not see it, whatever the other terms carry. Llama's rotary
    embedding reads its halves at ``32*(((x1 + 128*x0) // 32) % 4) + 128*x0 + x1 % 32``: the
    ``128*x0`` goes, ``(x1 // 32) % 4`` is ``x1 // 32`` for ``x1 < 128``, and the whole index
    is ``x1 + 128*x0``."""
    if not (div.is_Integer and mod.is_Integer) or div <= 0 or mod <= 0:
        return base
    terms = _linear_terms(base)
    if terms is None:
        return base
    turn = int(div * mod)
    kept = [(c, t) for c, t in terms if c % turn != 0]
    if len(kept) == len(terms):
        return base
    return sum((c * t for c, t in kept), sympy.Integer(0))


def _split_mod(terms, mod: sympy.Expr, ranges) -> sympy.Expr | None:
    """``(lo + hi) % mod`` as ``lo + m * ((hi / m) % (mod / m))`` for a factor ``m`` of ``mod``
    that divides every coefficient of ``hi``, where ``lo`` (the other terms) stays in
    ``[0, m)``: ``hi % mod`` is then a multiple of ``m`` below ``mod``, and adding ``lo`` never
    wraps. A channels-last image's rows in chunks of half an image read
    ``(r0 + 28*x0) % 56``, which is ``r0 + 28*(x0 % 2)`` for ``r0 < 28``: one division a value
    fewer, and the code generator sees the row's stride. None: no such factor."""
    if not mod.is_Integer or mod <= 1:
        return None
    m_all = int(mod)
    for m in sorted({sympy.igcd(m_all, int(c)) for c, _ in terms} - {1, m_all}, reverse=True):
        hi = [(c, t) for c, t in terms if c % m == 0]
        lo = [(c, t) for c, t in terms if c % m != 0]
        mx = _max_value(lo, ranges)
        if hi and lo and mx is not None and mx < m:
            inner = sum((c // m * t for c, t in hi), sympy.Integer(0))
            wrapped = simplify_index(ModularIndexing(inner, 1, m_all // m), ranges)
            return sum((c * t for c, t in lo), sympy.Integer(0)) + m * wrapped
    return None


def simplify_index(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """An equivalent, simpler expression, given ``0 <= v < ranges[v]`` for each variable."""
    if not isinstance(expr, sympy.Basic) or expr.is_Atom:
        return expr
    if not expr.has(FloorDiv, ModularIndexing):
        return expr
    if any(sympy.sympify(r).is_zero for r in ranges.values()):
        # a range of 0 (a dim of size 0): no point is indexed, and the rules would divide by it
        return expr
    return _simplify_remembered(expr, frozenset(ranges.items()))


# The same index is simplified over and over: every analysis re-runs the IR's loader closures
# (the scheduler once per candidate kernel, code generation, dead-code checks), and each load
# through a view rebuilds the same FloorDiv/ModularIndexing. The answer is a pure function of
# the expression and the ranges (both immutable sympy values, the whole key), so it is kept.
@functools.lru_cache(maxsize=1 << 16)
def _simplify_remembered(expr: sympy.Expr, ranges_items: frozenset) -> sympy.Expr:
    return _simplify(expr, dict(ranges_items))


def _simplify(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    def rewrite(e):
        if isinstance(e, FloorDiv):
            base, div = (simplify_index(a, ranges) for a in e.args)
            out = _split_div(base, div, ranges)
            if out is None and (reduced := _reduce_div(base, div, ranges)) is not None:
                base, div = reduced
                out = base if div == 1 else None
            return out if out is not None else FloorDiv(base, div)
        if isinstance(e, ModularIndexing):
            base, div, mod = (simplify_index(a, ranges) for a in e.args)
            base = _drop_whole_turns(base, div, mod)
            if _split_div(base, div, ranges) is None and (
                reduced := _reduce_div(base, div, ranges)
            ):
                base, div = reduced
            if div.is_Integer and mod.is_Integer:
                terms = _linear_terms(base)
                mx = None if terms is None else _max_value(terms, ranges)
                if mx is not None and mx < div * mod:
                    return simplify_index(FloorDiv(base, div), ranges)  # never wraps
            q = _split_div(base, div, ranges)
            if q is not None and mod.is_Integer:
                terms = _linear_terms(q)
                if terms is not None:
                    kept = [(c, t) for c, t in terms if c % mod != 0]
                    mx = _max_value(kept, ranges)
                    if mx is not None and mx < mod:
                        return sum((c * t for c, t in kept), sympy.Integer(0))
                    split = _split_mod(kept, mod, ranges)
                    if split is not None:
                        return split
                    return ModularIndexing(sum((c * t for c, t in kept), sympy.Integer(0)), 1, mod)
            return ModularIndexing(base, div, mod)
        return None

    out = sympy.expand(
        expr.replace(lambda e: isinstance(e, (FloorDiv, ModularIndexing)), _keep(rewrite))
    )
    merged = _recombine(_merge_quotient_remainder(out))
    # the merged FloorDiv(e, d) may simplify further (d == 1: e itself; a split of e by d).
    # The same terms in another order are no change: a sum holding torch's FloorDiv (from a
    # ShapeEnv size) beside this module's FloorDiv of the same arguments sorts the two either
    # way, and compared unequal it went back and forth until the recursion limit (fuzz seed
    # 54222: a max pool's output size (s - 1) // 2 + 1 under dynamic shapes)
    if merged == out or set(sympy.Add.make_args(merged)) == set(sympy.Add.make_args(out)):
        return out
    return simplify_index(merged, ranges)


def _merge_quotient_remainder(expr: sympy.Expr) -> sympy.Expr:
    """``c*ModularIndexing(e, d, m) + c*m*FloorDiv(e, d*m)`` is ``c*FloorDiv(e, d)``: the
    remainder and quotient of ``e // d`` by ``m`` put back together. A view that splits a dim
    and a reduction that flattens it again leave this pair (the rows of a ``[B, S, C]`` tensor
    read as ``C*(r % S) + S*C*(r // S)``, which is ``C*r``): merged, the index is linear again,
    with no division per element, and a code generator sees its stride."""
    while True:
        terms = [t.as_coeff_Mul() for t in sympy.Add.make_args(expr)]
        quotients = {(t.args[0], t.args[1]): c for c, t in terms if isinstance(t, FloorDiv)}
        for c, t in terms:
            if not isinstance(t, ModularIndexing):
                continue
            base, div, mod = t.args
            if quotients.get((base, div * mod)) == c * mod:
                expr = sympy.expand(
                    expr - c * t - c * mod * FloorDiv(base, div * mod) + c * FloorDiv(base, div)
                )
                break
        else:
            return expr


def _keep(fn):
    def inner(e):
        out = fn(e)
        return e if out is None else out

    return inner
