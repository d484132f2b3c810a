"""The fusion scheduler: dependencies, ``can_fuse``, ``score_fusion`` and the greedy loop.

Every realized ``ComputedBuffer`` is a ``SchedulerNode`` (its body recorded once, a ``LoopBody``);
extern kernels and named views are ``ExternNode``s (never fused, but they order the graph). A ``FusedGroup`` is a candidate kernel:
its nodes share one iteration space (x ranges, plus r ranges for reductions). Whether a group is
legal is decided by building it (``plan_group``): each node's body is rewritten over the kernel's
index symbols, its reads and writes recorded as ``MemoryDep``s, and the nodes assigned to stages.
A buffer produced and consumed inside a kernel must be read at exactly the index it was written.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from ._simplify import simplify_index
from .backend import BackendCapabilities
from .indexing import FloorDiv, ModularIndexing, index_symbol
from .ir import Buffer, ComputedBuffer, ExternKernel, NamedView, contiguous_strides, product
from .loop_body import iteration_order, iteration_ranges


@dataclass(frozen=True)
class MemoryDep:
    """A read or write of buffer ``name`` at ``index`` over an iteration space of ``size``."""

    name: str
    index: sympy.Expr
    size: tuple[sympy.Expr, ...]


@dataclass(frozen=True)
class FusionDecision:
    """The answer of ``can_fuse``: truthy when legal, else ``reason`` says why not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


#: score category -> its name in the fusion log
FUSION_KINDS = {3: "reduction-epilogue", 2: "vertical", 1: "horizontal"}


@dataclass(frozen=True)
class FusionRecord:
    """One decision of the greedy fusion loop, as the debug dir and ``TORCHKILN_LOGS=fusion``
    show it: the pair (buffer names joined by ``+``), its score (category 3 reduction-epilogue,
    2 vertical, 1 horizontal; bytes saved; -distance), and for a refusal ``can_fuse``'s reason.
    ``first`` is empty for the line that says fusion stopped because ``max_fusions`` ran out."""

    accepted: bool
    first: str
    second: str
    score: tuple[int, int, int] = (0, 0, 0)
    reason: str = ""

    def __str__(self) -> str:
        if not self.first:
            return f"stopped: {self.reason}"
        kind = FUSION_KINDS.get(self.score[0], "?")
        head = (
            f"{'fused' if self.accepted else 'rejected'} {self.first} + {self.second} ({kind}, "
            f"{self.score[1]} bytes saved)"
        )
        return head if self.accepted else f"{head}: {self.reason}"


class SchedulerNode:
    """One realized ComputedBuffer: its iteration space and its reads and writes."""

    def __init__(self, buf: ComputedBuffer, order: int) -> None:
        self.buf = buf
        self.name = buf.name
        self.order = order
        self.is_reduction = buf.is_reduction
        # a pointwise buffer laid out in another order than its logical dims (channels-last)
        # iterates in memory order: its innermost loop then walks unit stride, and vectorizes
        self.perm = iteration_order(buf)
        self.xr, self.rr = iteration_ranges(buf)
        self.xnumel = product(self.xr)
        self.rnumel = product(self.rr)
        # the body, recorded once: reads, writes and every replay come from it
        self.body = buf.loop_body
        self.is_scatter = buf.is_scatter
        # a scatter updates its target in place: it must run after the target's producer
        self.read_names = set(self.body.read_names) | (
            {buf.write_name} if self.is_scatter else set()
        )
        self.write_names = set(self.body.write_names)
        self._accesses: dict[tuple, tuple] = {}  # see ``accesses``

    def accesses(
        self,
        xs: tuple[sympy.Expr, ...],
        rs: tuple[sympy.Expr, ...],
        var_ranges: dict[sympy.Symbol, sympy.Expr],
        size: tuple[sympy.Expr, ...],
    ) -> tuple[tuple[MemoryDep, ...], tuple[MemoryDep, ...], tuple[sympy.Expr, ...]]:
        """The reads and writes (simplified over ``var_ranges``) and the expressions of this
        node's body at kernel indices ``xs``/``rs``, read off its recording.

        Remembered per node: the fusion loop plans every candidate group from scratch, so the
        same node is analysed at the same indices once per group it is tried in (a chain of
        merges re-plans each member at every step). The answer depends only on the arguments,
        which are the whole key.
        """
        key = (xs, rs, tuple(var_ranges.items()), size)
        found = self._accesses.get(key)
        if found is None:
            reads, writes, exprs = self.body.accesses(xs, rs)
            found = (
                tuple(MemoryDep(name, simplify_index(i, var_ranges), size) for name, i in reads),
                tuple(MemoryDep(name, simplify_index(i, var_ranges), size) for name, i in writes),
                tuple(exprs),
            )
            self._accesses[key] = found
        return found

    def xr_syms(self):
        return [index_symbol("x", i) for i in range(len(self.xr))]

    def rr_syms(self):
        return [index_symbol("r", i) for i in range(len(self.rr))]

    def body_in(self, xs: Sequence[sympy.Expr], rs: Sequence[sympy.Expr]) -> None:
        """Replay the body under the installed handler at (size-1-dropped) indices ``xs``/``rs``."""
        self.body(xs, rs)


class ExternNode:
    """An extern kernel or named view: ordered with the kernels, never fused."""

    def __init__(self, node: ExternKernel | NamedView, order: int) -> None:
        self.node = node
        self.order = order
        if isinstance(node, NamedView):
            self.read_names = {node.view.base.name}
            self.write_names = {node.name}
            self.name = node.name
        else:
            import torch.utils._pytree as pytree

            leaves = pytree.tree_leaves((node.args, node.kwargs))
            self.read_names = {x.name for x in leaves if isinstance(x, (Buffer, NamedView))}
            self.write_names = {b.name for b in node.outputs if b is not None}
            self.name = "/".join(sorted(self.write_names)) or f"extern{order}"


@dataclass(eq=False)
class FusedGroup:
    """A set of scheduler nodes (in program order) that becomes one kernel, or one extern step.

    ``mask`` has bit ``n.order`` set for each member; ``ancestors`` (kept by the ``Scheduler``)
    has the bits of every node in a group this one depends on, directly or not.
    """

    nodes: tuple[Any, ...]
    read_names: set[str] = field(default_factory=set)
    write_names: set[str] = field(default_factory=set)
    ancestors: int = 0

    def __post_init__(self) -> None:
        self.all_reads = set().union(*(n.read_names for n in self.nodes))
        self.write_names = set().union(*(n.write_names for n in self.nodes))
        self.read_names = self.all_reads - self.write_names
        self.order = min(n.order for n in self.nodes)
        self.mask = sum(1 << n.order for n in self.nodes)
        self.has_reduction = any(getattr(n, "is_reduction", False) for n in self.nodes)

    @property
    def is_extern(self) -> bool:
        return isinstance(self.nodes[0], ExternNode)

    @property
    def names(self) -> str:
        return "+".join(n.name for n in self.nodes)


@dataclass
class PlannedNode:
    node: SchedulerNode
    kind: str  # "loop" or "epilogue"
    reads: list[MemoryDep]
    writes: list[MemoryDep]
    xs_map: Any  # callable (kxs, krs) -> (node xs, node rs)
    exprs: tuple[sympy.Expr, ...] = ()  # what the body computes with beyond its indices


@dataclass
class GroupPlan:
    """A legal kernel: ranges, and the nodes in their stages."""

    xranges: tuple[sympy.Expr, ...]
    rranges: tuple[sympy.Expr, ...]
    stages: list[tuple[str, list[PlannedNode]]]


def _unflatten(flat: sympy.Expr, sizes: Sequence[sympy.Expr], ranges) -> list[sympy.Expr]:
    strides = contiguous_strides(sizes)
    out = []
    for d, (sz, st) in enumerate(zip(sizes, strides)):
        e = FloorDiv(flat, st) if d == 0 else ModularIndexing(flat, st, sz)
        out.append(simplify_index(e, ranges))
    return out


def _flatten(vars_: Sequence[sympy.Expr], sizes: Sequence[sympy.Expr]) -> sympy.Expr:
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

    planned: list[PlannedNode] = []
    for n in nodes:
        if n.is_reduction:
            kind = "loop"
            xs = (
                kxs
                if n.xr == tuple(xranges)
                else _unflatten(_flatten(kxs, xranges), n.xr, var_ranges)
            )
            rs = (
                krs
                if n.rr == tuple(rranges)
                else _unflatten(_flatten(krs, rranges), n.rr, var_ranges)
            )
        elif not rranges or (n.xnumel == X and R != 1):
            kind = "epilogue" if rranges else "loop"
            xs = (
                kxs
                if n.xr == tuple(xranges)
                else _unflatten(_flatten(kxs, xranges), n.xr, var_ranges)
            )
            rs = []
        elif n.xnumel == X * R and R != 1:
            kind = "loop"
            both = tuple(xranges) + tuple(rranges)
            perm = _matching_permutation(n.xr, both)
            if perm is not None:  # e.g. a reduction over dim 0 feeding a pointwise over (r, x)
                xs = [(kxs + krs)[perm.index(d)] for d in range(len(both))]
            else:
                xs = _unflatten(_flatten(kxs + krs, both), n.xr, var_ranges)
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
    return GroupPlan(tuple(xranges), tuple(rranges), stages)


# A buffer read by very many groups (a mask, a scalar) would make every pair of its readers a
# horizontal candidate: each reader is paired only with the next this-many readers in program order.
# Producer/consumer pairs are never capped.
_SHARED_READ_WINDOW = 16


class Scheduler:
    """Builds groups from the lowered nodes and fuses them greedily, best-scored legal pair first.

    Cost is near-linear in the graph: buffers are indexed to the groups touching them once;
    candidates come only from shared buffers; the cycle check reads ancestor bitsets kept up to
    date on each merge; candidates wait in a priority queue instead of being rebuilt per merge.
    """

    def __init__(
        self, nodes: Sequence[Any], caps: BackendCapabilities, graph_outputs: set[str]
    ) -> None:
        self.caps = caps
        self.graph_outputs = graph_outputs
        sn = []
        for i, node in enumerate(nodes):
            sn.append(
                SchedulerNode(node, i) if isinstance(node, ComputedBuffer) else ExternNode(node, i)
            )
        self.groups: list[FusedGroup] = [FusedGroup((n,)) for n in sn]
        self._plans: dict[tuple[str, ...], Any] = {}
        self.log: list[str] = []  # the accepted fusions, in order
        # every decision, accepted or rejected (with why), in order: the debug dir's schedule
        self.decisions: list[FusionRecord] = []
        self._nbytes: dict[str, int] = {}
        for n in sn:
            if isinstance(n, SchedulerNode):
                numel = n.buf.layout.numel()
                self._nbytes.setdefault(
                    n.name, int(numel) * n.buf.layout.dtype.itemsize if numel.is_number else 1 << 20
                )
        self._preds, self._succs = _node_dependencies(sn)
        self._group_of: list[FusedGroup] = list(self.groups)  # by node order
        # ancestors in program order: every predecessor precedes its node
        for g in self.groups:
            for u in self._preds[g.order]:
                g.ancestors |= self.groups[u].ancestors | (1 << u)
        self._users: dict[str, set[FusedGroup]] = {}  # buffer -> groups reading or writing it
        for g in self.groups:
            for name in g.all_reads | g.write_names:
                self._users.setdefault(name, set()).add(g)
        # a group's place in the candidate order of the old quadratic loop: its position in
        # ``groups``, new groups last; ties in score are broken by it, so logs stay comparable
        self._pos: dict[FusedGroup, int] = {g: i for i, g in enumerate(self.groups)}

    # -- the dependency graph between groups -------------------------------------------------
    def group_preds(self, g: FusedGroup) -> set[FusedGroup]:
        out = {self._group_of[u] for n in g.nodes for u in self._preds[n.order]}
        out.discard(g)
        return out

    def group_succs(self, g: FusedGroup) -> set[FusedGroup]:
        out = {self._group_of[v] for n in g.nodes for v in self._succs[n.order]}
        out.discard(g)
        return out

    def _creates_cycle(self, a: FusedGroup, b: FusedGroup) -> bool:
        """Is there a path a -> X -> ... -> b (or b -> ... -> a) through another group X?

        Such an X would have to run both after and before the fused kernel. X exists iff a
        direct predecessor of the later end, other than the earlier end, descends from it.
        """
        for src, dst in ((a, b), (b, a)):
            for p in self.group_preds(dst):
                if p is not src and p.ancestors & src.mask:
                    return True
        return False

    # -- legality -----------------------------------------------------------------------------
    def plan(self, nodes: Sequence[SchedulerNode]) -> GroupPlan | FusionDecision:
        key = tuple(n.name for n in nodes)
        if key not in self._plans:
            try:
                self._plans[key] = plan_group(nodes, self.caps)
            except Exception as e:  # noqa: BLE001 - an index we cannot analyse: do not fuse, say why
                self._plans[key] = FusionDecision(
                    False, f"cannot analyse the fused kernel: {type(e).__name__}: {e}"
                )
        return self._plans[key]

    def can_fuse(self, a: FusedGroup, b: FusedGroup) -> FusionDecision:
        """May ``a`` and ``b`` become one kernel? Carries the reason when not.

        A refusal is permanent while ``a`` and ``b`` exist: their nodes do not change, and a path
        between them through other groups survives any merge of those other groups.
        """
        if a.is_extern or b.is_extern:
            return FusionDecision(False, "extern kernels are not fused")
        if any(getattr(n, "is_scatter", False) for n in a.nodes + b.nodes):
            return FusionDecision(False, "scatter nodes update a buffer in place and are not fused")
        if self._creates_cycle(a, b):
            return FusionDecision(False, "fusing would create a cycle through another node")
        nodes = tuple(sorted(a.nodes + b.nodes, key=lambda n: n.order))
        plan = self.plan(nodes)
        return plan if isinstance(plan, FusionDecision) else FusionDecision(True)

    # -- scoring ------------------------------------------------------------------------------
    def score_fusion(self, a: FusedGroup, b: FusedGroup) -> tuple[int, int, int]:
        """(category, bytes of memory traffic saved, -distance): higher fuses first.

        Categories: 3 reduction-epilogue, 2 vertical (producer-consumer), 1 horizontal (shared reads).
        """
        first, second = (a, b) if a.order <= b.order else (b, a)
        shared = first.write_names & second.all_reads
        if shared:
            category = 3 if (first.has_reduction and not second.has_reduction) else 2
            names = shared
        else:
            category, names = 1, first.read_names & second.read_names
        saved = sum(self._bytes(n) for n in names)
        return category, saved, -(second.order - first.order)

    def _bytes(self, name: str) -> int:
        return self._nbytes.get(name, 1)

    # -- candidates ---------------------------------------------------------------------------
    def _partners(self, g: FusedGroup) -> set[FusedGroup]:
        """Groups sharing a buffer with ``g`` (producer, consumer, or a nearby co-reader)."""
        out: set[FusedGroup] = set()
        for name in g.all_reads | g.write_names:
            users = self._users.get(name, ())
            if len(users) <= _SHARED_READ_WINDOW + 1 or name in g.write_names:
                out.update(users)
                continue
            # a widely shared buffer: its writers, and the readers nearest g in program order
            ranked = sorted(users, key=lambda h: h.order)
            at = ranked.index(g)
            out.update(ranked[max(0, at - _SHARED_READ_WINDOW) : at + _SHARED_READ_WINDOW + 1])
            out.update(h for h in users if name in h.write_names)
        out.discard(g)
        return {h for h in out if not h.is_extern}

    def _push(self, heap: list, seen: set, a: FusedGroup, b: FusedGroup) -> None:
        if self._pos[a] > self._pos[b]:
            a, b = b, a
        key = (self._pos[a], self._pos[b])
        if key in seen:
            return
        seen.add(key)
        score = self.score_fusion(a, b)
        heapq.heappush(heap, (tuple(-x for x in score) + key, score, a, b))

    # -- the greedy loop ----------------------------------------------------------------------
    def fuse(self, max_fusions: int | None = None) -> None:
        """Fuse the best-scored legal pair until none is left or ``max_fusions`` merges are done.

        Equal scores go to the pair earliest in ``groups`` (merged groups count as last), so fuel
        N reproduces the first N lines of the unlimited run's ``log``.
        """
        fuel = max_fusions
        heap: list = []
        seen: set[tuple[int, int]] = set()
        alive = {g for g in self.groups if not g.is_extern}
        for g in self.groups:
            if not g.is_extern:
                for h in self._partners(g):
                    self._push(heap, seen, g, h)
        while heap and (fuel is None or fuel > 0):
            _, score, a, b = heapq.heappop(heap)
            if a not in alive or b not in alive:
                continue  # stale: one side was merged since; the merged group was pushed anew
            decision = self.can_fuse(a, b)
            if not decision:
                self.decisions.append(FusionRecord(False, a.names, b.names, score, decision.reason))
                continue
            merged = self._merge(a, b)
            alive -= {a, b}
            alive.add(merged)
            self.log.append(f"fused {a.names} + {b.names} (score {score})")
            self.decisions.append(FusionRecord(True, a.names, b.names, score))
            for h in self._partners(merged):
                self._push(heap, seen, merged, h)
            if fuel is not None:
                fuel -= 1
        if heap and fuel == 0:
            left = sum(1 for _, _, a, b in heap if a in alive and b in alive)
            if left:
                self.decisions.append(
                    FusionRecord(
                        False,
                        "",
                        "",
                        reason=f"max_fusions={max_fusions} spent, {left} candidate "
                        "pair(s) not considered",
                    )
                )
        self.groups = self._topological(self.groups)

    def _merge(self, a: FusedGroup, b: FusedGroup) -> FusedGroup:
        merged = FusedGroup(tuple(sorted(a.nodes + b.nodes, key=lambda n: n.order)))
        merged.ancestors = (a.ancestors | b.ancestors) & ~merged.mask
        self.groups = [g for g in self.groups if g is not a and g is not b] + [merged]
        self._pos[merged] = len(self._pos)
        for n in merged.nodes:
            self._group_of[n.order] = merged
        for g in (a, b):
            for name in g.all_reads | g.write_names:
                self._users[name].discard(g)
        for name in merged.all_reads | merged.write_names:
            self._users[name].add(merged)
        # every descendant now also depends on whatever the other half depended on; stop where
        # nothing is new (then nothing is new below either: ancestors only grow downwards)
        new = merged.ancestors | merged.mask
        work = list(self.group_succs(merged))
        while work:
            d = work.pop()
            if new & ~d.ancestors:
                d.ancestors |= new
                work.extend(self.group_succs(d))
        return merged

    def _topological(self, groups: list[FusedGroup]) -> list[FusedGroup]:
        """Kahn's algorithm, taking the ready group earliest in program order first."""
        indeg = {g: len(self.group_preds(g)) for g in groups}
        ready = [(g.order, i, g) for i, g in enumerate(groups) if indeg[g] == 0]
        heapq.heapify(ready)
        index = {g: i for i, g in enumerate(groups)}
        out: list[FusedGroup] = []
        while ready:
            _, _, g = heapq.heappop(ready)
            out.append(g)
            for h in self.group_succs(g):
                indeg[h] -= 1
                if indeg[h] == 0:
                    heapq.heappush(ready, (h.order, index[h], h))
        if len(out) != len(
            groups
        ):  # pragma: no cover - fusion never creates cycles (checked in can_fuse)
            raise RuntimeError("cycle among fused groups")
        return out


def _node_dependencies(nodes: Sequence[Any]) -> tuple[list[set[int]], list[set[int]]]:
    """Node-level edges by node order: a read after a write (of the same buffer), and a write
    after any earlier read or write (a scatter updating its target in place)."""
    preds: list[set[int]] = [set() for _ in nodes]
    succs: list[set[int]] = [set() for _ in nodes]
    writers: dict[str, list[int]] = {}
    readers: dict[str, list[int]] = {}

    def edge(u: int, v: int) -> None:
        if u != v:
            preds[v].add(u)
            succs[u].add(v)

    for n in nodes:
        v = n.order
        for name in n.read_names:
            for u in writers.get(name, ()):
                edge(u, v)
        for name in n.write_names:
            for u in readers.get(name, ()):
                edge(u, v)
            for u in writers.get(name, ()):
                edge(u, v)
        for name in n.read_names:
            readers.setdefault(name, []).append(v)
        for name in n.write_names:
            writers.setdefault(name, []).append(v)
    return preds, succs
