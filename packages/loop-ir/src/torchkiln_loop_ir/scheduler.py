"""The fusion scheduler: ``can_fuse``, ``score_fusion``, the greedy loop and the final order.

The nodes it works on and their dependencies are in ``scheduler_nodes.py``; whether a group of
nodes can be one kernel is decided by building it, ``plan_group`` in ``group_plan.py``. Those
modules' names are importable from here too.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .backend import BackendCapabilities
from .group_plan import FusionDecision, GroupPlan, PlannedNode, plan_group
from .ir import ComputedBuffer
from .scheduler_nodes import ExternNode, FusedGroup, MemoryDep, SchedulerNode, node_dependencies

__all__ = [
    "FUSION_KINDS",
    "ExternNode",
    "FusedGroup",
    "FusionDecision",
    "FusionRecord",
    "GroupPlan",
    "MemoryDep",
    "PlannedNode",
    "Scheduler",
    "SchedulerNode",
    "plan_group",
]


#: how ``Scheduler.can_fuse`` begins the reason of a pair with another group on a path between
#: them (no fusion can ever join them: the meta-package's perf hints count these apart)
CYCLE_REASON = "fusing would create a cycle through"
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


# A buffer read by very many groups (a mask, a scalar) would make every pair of its readers a
# horizontal candidate: each reader is paired only with the next this-many readers in program order.
# Producer/consumer pairs are never capped.
_SHARED_READ_WINDOW = 16

# Pointwise kernels of at most this many elements (a batch norm's ``num_batches_tracked += 1``)
# pair with their like-sized neighbours as horizontal candidates, though they share no buffer:
# ResNet-50's training forward launched 53 one-element kernels, one per batch norm, in a step
# the GPU runs host-bound. A fused group of them stays tiny up to this many nodes.
_TINY_NUMEL = 64
_TINY_MAX_NODES = 32

# Two groups that share no buffer (siblings, tiny peers) fuse only while each of their nodes
# visits at most this many points (output elements times reduction length): such kernels are
# launch-bound, and one launch is what fusing them saves. Larger ones gain nothing from sharing a
# launch and lose parallelism: BERT-base's backward fused the weight-gradient column sums of six
# layers (siblings through one multi-output kernel) into one 1.3 ms kernel.
_SHARE_NOTHING_MAX_POINTS = 1 << 20


def _share_a_buffer(a: FusedGroup, b: FusedGroup) -> bool:
    """Whether one of ``a``/``b`` reads what the other writes, or both read one buffer."""
    return bool(
        a.write_names & b.all_reads or b.write_names & a.all_reads or a.read_names & b.read_names
    )


def _launch_bound(g: FusedGroup) -> bool:
    """Whether every node of ``g`` visits at most ``_SHARE_NOTHING_MAX_POINTS`` points."""
    for n in g.nodes:
        points = n.xnumel * n.rnumel
        if not points.is_number or int(points) > _SHARE_NOTHING_MAX_POINTS:
            return False
    return True


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
        self._preds, self._succs = node_dependencies(sn)
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
        # tiny pointwise groups by element count, in program order (see _TINY_NUMEL)
        self._tiny: dict[int, list[FusedGroup]] = {}
        for g in self.groups:
            size = self._tiny_size(g)
            if size is not None:
                self._tiny.setdefault(size, []).append(g)

    # -- the dependency graph between groups -------------------------------------------------
    def group_preds(self, g: FusedGroup) -> set[FusedGroup]:
        out = {self._group_of[u] for n in g.nodes for u in self._preds[n.order]}
        out.discard(g)
        return out

    def group_succs(self, g: FusedGroup) -> set[FusedGroup]:
        out = {self._group_of[v] for n in g.nodes for v in self._succs[n.order]}
        out.discard(g)
        return out

    def _cycle_through(self, a: FusedGroup, b: FusedGroup) -> FusedGroup | None:
        """A group X on a path a -> X -> ... -> b (or b -> ... -> a), or None.

        Such an X would have to run both after and before the fused kernel. X exists iff a
        direct predecessor of the later end, other than the earlier end, descends from it
        (that predecessor is returned: the last group on the path before the later end).
        """
        for src, dst in ((a, b), (b, a)):
            hits = [p for p in self.group_preds(dst) if p is not src and p.ancestors & src.mask]
            if hits:  # the earliest in program order: the same name in every run's log
                return min(hits, key=lambda g: g.order)
        return None

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
        between = self._cycle_through(a, b)
        if between is not None:
            what = "an extern call" if between.is_extern else "a kernel"
            return FusionDecision(False, f"{CYCLE_REASON} {what} between them ({between.names})")
        if not _share_a_buffer(a, b) and not (_launch_bound(a) and _launch_bound(b)):
            return FusionDecision(
                False,
                "they share no buffer and are not launch-bound (a node visits more than "
                f"{_SHARE_NOTHING_MAX_POINTS} points)",
            )
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
        out.update(self._siblings(g))
        out.update(self._tiny_peers(g))
        out.discard(g)
        return {h for h in out if not h.is_extern}

    def _tiny_size(self, g: FusedGroup) -> int | None:
        """The element count of a tiny pointwise group (every node of one static size of at
        most ``_TINY_NUMEL``, at most ``_TINY_MAX_NODES`` nodes), else None."""
        if g.is_extern or g.has_reduction or len(g.nodes) > _TINY_MAX_NODES:
            return None
        sizes = {n.xnumel for n in g.nodes}
        if len(sizes) != 1:
            return None
        (size,) = sizes
        if not size.is_number or int(size) > _TINY_NUMEL:
            return None
        return int(size)

    def _tiny_peers(self, g: FusedGroup) -> list[FusedGroup]:
        """The tiny groups of ``g``'s size nearest it in program order."""
        size = self._tiny_size(g)
        if size is None:
            return []
        peers = self._tiny.get(size, [])
        if g not in peers:
            return []
        at = peers.index(g)
        return peers[max(0, at - _SHARED_READ_WINDOW) : at + _SHARED_READ_WINDOW + 1]

    def _consumers(self, producer: FusedGroup) -> set[FusedGroup]:
        """The non-extern groups reading an output of a multi-output ``producer`` (none past
        the window: a widely read buffer's readers pair up as co-readers already)."""
        out: set[FusedGroup] = set()
        if len(producer.write_names) < 2:
            return out
        for name in producer.write_names:
            readers = self._users.get(name, ())
            if len(readers) <= _SHARED_READ_WINDOW:
                out.update(h for h in readers if name not in h.write_names and not h.is_extern)
        return out

    def _siblings(self, g: FusedGroup) -> set[FusedGroup]:
        """Groups reading another output of a kernel ``g`` reads from: the finishing kernels of
        a split reduction's partials (a batch-norm backward's two per-channel sums) share no
        buffer, yet run over the same ranges; one kernel is one launch fewer, in steps a GPU
        runs host-bound. Only multi-output producers, and readers near ``g``."""
        out: set[FusedGroup] = set()
        for name in g.all_reads:
            for producer in self._users.get(name, ()):
                if name in producer.write_names:
                    out |= self._consumers(producer)
        return out

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
            # a multi-output kernel now: its consumers are siblings (see _siblings)
            consumers = sorted(
                {h for h in self._consumers(merged) if h in alive}, key=lambda h: self._pos[h]
            )
            for i, h in enumerate(consumers):
                for k in consumers[i + 1 :]:
                    self._push(heap, seen, h, k)
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
        for g in (a, b):
            if (old := self._tiny_size(g)) is not None and g in self._tiny.get(old, ()):
                self._tiny[old].remove(g)
        size = self._tiny_size(merged)
        if size is not None:
            peers = self._tiny.setdefault(size, [])
            peers.append(merged)
            peers.sort(key=lambda h: h.order)
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
