"""Fusion legality: laying a group of scheduler nodes out as one kernel (``plan_group``).

Whether a group is legal is decided by building it: each node's body is rewritten over the
kernel's index symbols, its reads and writes recorded as ``MemoryDep``s, and the nodes assigned to
stages ("loop": reductions and (x, r) pointwise; "epilogue": x only, after a reduction). A buffer
produced and consumed inside a kernel must be read at exactly the index it was written. The
answer is a ``GroupPlan``, or a ``FusionDecision`` that says why not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy

from ._simplify import simplify_index
from .backend import BackendCapabilities
from .indexing import ROW_PROGRAM, FloorDiv, ModularIndexing, contiguous_along, index_symbol
from .ir import Reduction, contiguous_strides, product
from .scheduler_nodes import MemoryDep, SchedulerNode


@dataclass(frozen=True)
class FusionDecision:
    """The answer of ``can_fuse``: truthy when legal, else ``reason`` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class PlannedNode:
    node: SchedulerNode
    kind: str  # "loop" or "epilogue"
    reads: list[MemoryDep]
    writes: list[MemoryDep]
    xs_map: Any  # callable (kxs, krs) -> (node xs, node rs)
    exprs: tuple[sympy.Expr, ...] = ()  # what the body computes with beyond its indices
    across_rows: bool = False  # a partial over the rows of a mixed-order kernel's program


@dataclass
class GroupPlan:
    """A legal kernel: ranges, and the nodes in their stages."""

    xranges: tuple[sympy.Expr, ...]
    rranges: tuple[sympy.Expr, ...]
    stages: list[tuple[str, list[PlannedNode]]]
    row_programs: int = 0  # a mixed-order kernel's programs (``KernelSpec.row_programs``)


def _unflatten(flat: sympy.Expr, sizes: Sequence[sympy.Expr], ranges) -> list[sympy.Expr]:
    strides = contiguous_strides(sizes)
    out = []
    for d, (sz, st) in enumerate(zip(sizes, strides)):
        e = FloorDiv(flat, st) if d == 0 else ModularIndexing(flat, st, sz)
        out.append(simplify_index(e, ranges))
    return out


def flatten(vars_: Sequence[sympy.Expr], sizes: Sequence[sympy.Expr]) -> sympy.Expr:
    return sum((v * s for v, s in zip(vars_, contiguous_strides(sizes))), sympy.Integer(0))


def _matching_permutation(
    sizes: Sequence[sympy.Expr], target: Sequence[sympy.Expr]
) -> list[int] | None:
    """``p`` with ``sizes[p[k]] == target[k]`` (identity preferred), or None.

    Only unambiguous matches are used: with repeated sizes anything but the identity is a guess.
    """
    if tuple(sizes) == tuple(target):
        return list(range(len(sizes)))
    if len(sizes) != len(target) or len(set(sizes)) != len(sizes):
        return None
    where = {s: i for i, s in enumerate(sizes)}
    if set(where) != set(target):
        return None
    return [where[t] for t in target]


def plan_group(
    nodes: Sequence[SchedulerNode], caps: BackendCapabilities
) -> GroupPlan | FusionDecision:
    """Lay ``nodes`` out as one kernel, or say why they cannot share one."""
    reds = [n for n in nodes if n.is_reduction]
    across, programs = _across_rows(reds, caps)
    reds = [n for n in reds if n not in across]
    if reds:
        shapes = {(n.xr, n.rr) for n in reds}
        numels = {(n.xnumel, n.rnumel) for n in reds}
        if len(numels) > 1:
            return FusionDecision(False, "reductions over different (x, r) sizes")
        xranges, rranges = (
            next(iter(shapes)) if len(shapes) == 1 else ((reds[0].xnumel,), (reds[0].rnumel,))
        )
    else:
        shapes = {n.xr for n in nodes}
        if len({n.xnumel for n in nodes}) > 1:
            return FusionDecision(False, "pointwise nodes over different numbers of elements")
        xranges, rranges = (next(iter(shapes)) if len(shapes) == 1 else (nodes[0].xnumel,)), ()
    kxs = [index_symbol("x", i) for i in range(len(xranges))]
    krs = [index_symbol("r", i) for i in range(len(rranges))]
    var_ranges = dict(zip(kxs + krs, tuple(xranges) + tuple(rranges)))
    X, R = product(xranges), product(rranges)

    if across:
        # a mixed-order kernel (mixed_order.py): program ROW_PROGRAM loops over rows
        # [p * J, (p + 1) * J); the partials' x is (p, the kernel's r), their r the row in it
        var_ranges[ROW_PROGRAM] = sympy.Integer(programs)
        row_in_chunk = flatten(kxs, xranges) - ROW_PROGRAM * (X // programs)
    planned: list[PlannedNode] = []
    for n in nodes:
        if n in across:
            xs, rs = [ROW_PROGRAM, *krs], [row_in_chunk]
            reads, writes, exprs = n.accesses(
                tuple(xs), tuple(rs), var_ranges, tuple(xranges) + tuple(rranges)
            )
            planned.append(
                PlannedNode(
                    n, "loop", list(reads), list(writes), (tuple(xs), tuple(rs)), exprs, True
                )
            )
            continue
        if n.is_reduction:
            kind = "loop"
            xs = (
                kxs
                if n.xr == tuple(xranges)
                else _unflatten(flatten(kxs, xranges), n.xr, var_ranges)
            )
            rs = (
                krs
                if n.rr == tuple(rranges)
                else _unflatten(flatten(krs, rranges), n.rr, var_ranges)
            )
        elif not rranges or (n.xnumel == X and R != 1):
            kind = "epilogue" if rranges else "loop"
            xs = (
                kxs
                if n.xr == tuple(xranges)
                else _unflatten(flatten(kxs, xranges), n.xr, var_ranges)
            )
            rs = []
        elif n.xnumel == X * R and R != 1:
            kind = "loop"
            both = tuple(xranges) + tuple(rranges)
            perm = _matching_permutation(n.xr, both)
            if perm is not None:  # e.g. a reduction over dim 0 feeding a pointwise over (r, x)
                xs = [(kxs + krs)[perm.index(d)] for d in range(len(both))]
            else:
                xs = _unflatten(flatten(kxs + krs, both), n.xr, var_ranges)
            rs = []
        else:
            return FusionDecision(
                False, f"{n.name} iterates over {n.xnumel} elements, not {X} or {X}*{R}"
            )
        size = tuple(xranges) + (tuple(rranges) if kind == "loop" else ())
        reads, writes, exprs = n.accesses(tuple(xs), tuple(rs), var_ranges, size)
        planned.append(
            PlannedNode(n, kind, list(reads), list(writes), (tuple(xs), tuple(rs)), exprs)
        )

    if kxs and krs and len(reds) > 1 and len(_reduction_directions(planned, kxs[-1], krs[-1])) > 1:
        return FusionDecision(
            False,
            "a reduction reading memory contiguous along x (a column reduction) beside one "
            "reading it contiguous along r: one kernel's block layout coalesces only one of them",
        )

    # stages, in program order; a node goes to the first stage its inputs allow
    stages: list[tuple[str, list[PlannedNode]]] = []
    stage_of: dict[str, int] = {}
    writer: dict[str, PlannedNode] = {}
    for p in planned:
        lo = 0
        for dep in p.reads:
            w = writer.get(dep.name)
            if w is None:
                continue
            if dep.index != w.writes[0].index:
                return FusionDecision(
                    False,
                    f"{p.node.name} reads {dep.name} at {dep.index}, "
                    f"written at {w.writes[0].index} in the same kernel",
                )
            s = stage_of[dep.name]
            strict = w.node.is_reduction or (w.kind == "epilogue" and p.kind == "loop")
            lo = max(lo, s + 1 if strict else s)
        target = next((i for i in range(lo, len(stages)) if stages[i][0] == p.kind), None)
        if target is None:
            stages.append((p.kind, []))
            target = len(stages) - 1
        stages[target][1].append(p)
        for written in p.writes:
            writer[written.name] = p
            stage_of[written.name] = target
    loop_stages = [s for s in stages if s[0] == "loop"]
    red_stages = [s for s in loop_stages if any(p.node.is_reduction for p in s[1])]
    if not caps.reduction_broadcast_reduction:
        if len(loop_stages) > 1:
            return FusionDecision(
                False,
                "backend cannot fuse a reduction with a consumer of a reduction "
                "(reduction_broadcast_reduction=False)",
            )
    elif len(red_stages) > max(caps.max_reduction_stages, 1):
        return FusionDecision(False, f"more than {caps.max_reduction_stages} reduction stages")
    # every stage order must respect program order between stages too (a later stage reading an
    # earlier one is guaranteed above; an earlier stage must not read a later stage's writes)
    for i, (_, ps) in enumerate(stages):
        for p in ps:
            for dep in p.reads:
                if dep.name in stage_of and stage_of[dep.name] > i:
                    return FusionDecision(
                        False, f"{p.node.name} would run before its producer {dep.name}"
                    )
    return GroupPlan(tuple(xranges), tuple(rranges), stages, programs if across else 0)


def _row_chunks(n: SchedulerNode) -> int:
    data = n.buf.data
    return data.row_chunks if isinstance(data, Reduction) else 0


def _across_rows(
    reds: Sequence[SchedulerNode], caps: BackendCapabilities
) -> tuple[list[SchedulerNode], int]:
    """The partials (``Reduction.row_chunks``) among ``reds`` that reduce chunks of the rows of
    its other reductions, and how many chunks, for a mixed-order kernel (``mixed_order.py``);
    ([], 0) when the group is no such kernel: no partials, no row reduction beside them, or
    one that does not match (another number of chunks, rows or columns, or rows longer than
    the backend's ``mixed_order_rnumel``)."""
    partials = [n for n in reds if _row_chunks(n)]
    rows = [n for n in reds if not _row_chunks(n)]
    if not partials or not rows or caps.mixed_order_rnumel <= 0:
        return [], 0
    xr, rr = rows[0].xr, rows[0].rr
    X, R = product(xr), product(rr)
    programs = _row_chunks(partials[0])
    if not (R.is_Integer and X.is_Integer) or int(R) > caps.mixed_order_rnumel:
        return [], 0
    for n in partials:
        if (
            _row_chunks(n) != programs
            or n.xr != (sympy.Integer(programs), *rr)
            or len(n.rr) != 1
            or n.rr[0] * programs != X
        ):
            return [], 0
    return partials, programs


def _reduction_directions(
    planned: Sequence[PlannedNode], xvar: sympy.Symbol, rvar: sympy.Symbol
) -> set[str]:
    """Along which of the kernel's innermost dims (``"x"``, ``"r"``) each reduction's reads
    that vary along both are mostly contiguous. A row reduction and a column reduction over
    the same numbers of elements (a layer norm backward's row sums and its weight gradient's
    partial column sums, split into as many chunks as rows over width) would otherwise share
    a kernel whose layout strides through one of them a cache line per value (9% of the
    bandwidth where each kernel alone reaches 90%)."""
    directions = set()
    for p in planned:
        if not p.node.is_reduction:
            continue
        # a read that stays put along one dim (a row's mean: step 0 along x) is a broadcast,
        # served from cache whichever way the block is laid out
        along = [contiguous_along(dep.index, xvar, rvar, broadcasts=False) for dep in p.reads]
        along_x, along_r = along.count("x"), along.count("r")
        if along_x != along_r:
            directions.add("x" if along_x > along_r else "r")
    return directions
