"""Merging a kernel's adjacent dimensions that every access walks as one (``merge_dims``).

A kernel over an NCHW tensor iterates ``(n, c, h, w)``; where every index the kernel computes
uses ``h`` and ``w`` only as ``W*h + w`` (times a common stride), the two are one dimension of
``H*W``. Merged, a C++ kernel's innermost loop runs ``H*W`` times, not ``W`` (a ResNet's last
stage: 49 values a loop where 7 left a vector unit mostly idle), its loop-invariant values are
computed once per ``H*W`` values, and a generated index holds one term fewer.

The test for dims ``d`` and ``d + 1`` (sizes ``s_d``, ``s_{d+1}``): every memory index and every
index value of the kernel is linear in both variables, with no ``FloorDiv``/``ModularIndexing``
of either, and ``coeff(v_d) == s_{d+1} * coeff(v_{d+1})``. The test is transitive, so runs of
consecutive mergeable dims merge into one. x dims merge with x dims and r dims with r dims. A
merged kernel is the same kernel: each node's old variables are the merged variable unflattened
(``FloorDiv``/``ModularIndexing``), which the index simplifier folds back into linear terms.

Whether a backend's kernels are merged is its ``BackendCapabilities.merge_dims``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import sympy

from ._simplify import simplify_index
from .group_plan import GroupPlan, PlannedNode
from .indexing import FloorDiv, ModularIndexing, index_symbol
from .ir import contiguous_strides, product


def _exprs(plan: GroupPlan) -> list[sympy.Expr]:
    out: list[sympy.Expr] = []
    for _, planned in plan.stages:
        for p in planned:
            out.extend(sympy.sympify(d.index) for d in (*p.reads, *p.writes))
            out.extend(sympy.sympify(e) for e in p.exprs)
    return out


def _mergeable(
    exprs: Sequence[sympy.Expr], outer: sympy.Symbol, inner: sympy.Symbol, inner_size: sympy.Expr
) -> bool:
    pair = {outer, inner}
    for e in exprs:
        if not (e.free_symbols & pair):
            continue
        if any(a.free_symbols & pair for a in e.atoms(FloorDiv, ModularIndexing)):
            return False
        e = sympy.expand(e)
        c_outer, c_inner = e.coeff(outer, 1), e.coeff(inner, 1)
        rest = sympy.expand(e - c_outer * outer - c_inner * inner)
        if (c_outer.free_symbols | c_inner.free_symbols | rest.free_symbols) & pair:
            return False  # a product of the two, or a power
        if sympy.expand(c_outer - inner_size * c_inner) != 0:
            return False
    return True


def _runs(exprs: Sequence[sympy.Expr], prefix: str, sizes: Sequence[sympy.Expr]) -> list[list[int]]:
    """Consecutive dims of ``sizes`` grouped where they merge."""
    runs: list[list[int]] = []
    for d in range(len(sizes)):
        if runs and _mergeable(
            exprs, index_symbol(prefix, d - 1), index_symbol(prefix, d), sizes[d]
        ):
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def _unflattened(
    prefix: str, sizes: Sequence[sympy.Expr], runs: list[list[int]]
) -> tuple[dict[sympy.Symbol, sympy.Expr], tuple[sympy.Expr, ...]]:
    """{old variable: its value in the merged variables}, and the merged sizes."""
    sub: dict[sympy.Symbol, sympy.Expr] = {}
    merged = []
    for k, run in enumerate(runs):
        var = index_symbol(prefix, k)
        run_sizes = [sizes[d] for d in run]
        for pos, (d, stride) in enumerate(zip(run, contiguous_strides(run_sizes))):
            if len(run) == 1:
                sub[index_symbol(prefix, d)] = var
            elif pos == 0:
                sub[index_symbol(prefix, d)] = FloorDiv(var, stride)
            else:
                sub[index_symbol(prefix, d)] = ModularIndexing(var, stride, run_sizes[pos])
        merged.append(product(run_sizes))
    return sub, tuple(merged)


def merge_dims(plan: GroupPlan) -> GroupPlan:
    """``plan`` with its mergeable adjacent dims merged (itself when none are, and for a
    mixed-order kernel, whose row programs index the x dims as they are)."""
    if plan.row_programs:
        return plan
    exprs = _exprs(plan)
    xruns = _runs(exprs, "x", plan.xranges)
    rruns = _runs(exprs, "r", plan.rranges)
    if len(xruns) == len(plan.xranges) and len(rruns) == len(plan.rranges):
        return plan
    xsub, xranges = _unflattened("x", plan.xranges, xruns)
    rsub, rranges = _unflattened("r", plan.rranges, rruns)
    sub = {**xsub, **rsub}
    ranges = {index_symbol("x", i): s for i, s in enumerate(xranges)}
    ranges.update({index_symbol("r", i): s for i, s in enumerate(rranges)})

    def moved(e: sympy.Expr) -> sympy.Expr:
        return simplify_index(sympy.sympify(e).xreplace(sub), ranges)

    def dep(d, size):
        return dataclasses.replace(d, index=moved(d.index), size=size)

    def node(p: PlannedNode) -> PlannedNode:
        size = xranges + (rranges if p.kind == "loop" else ())
        return PlannedNode(
            p.node,
            p.kind,
            [dep(d, size) for d in p.reads],
            [dep(d, size) for d in p.writes],
            tuple(tuple(sympy.sympify(e).xreplace(sub) for e in v) for v in p.xs_map),
            tuple(moved(e) for e in p.exprs),
            p.across_rows,
        )

    stages = [(kind, [node(p) for p in planned]) for kind, planned in plan.stages]
    return GroupPlan(xranges, rranges, stages, plan.row_programs)
