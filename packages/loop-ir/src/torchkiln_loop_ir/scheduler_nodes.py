"""The units the fusion scheduler works on, and the dependencies between them.

Every realized ``ComputedBuffer`` is a ``SchedulerNode`` (its body recorded once, a ``LoopBody``,
its reads and writes read off that recording as ``MemoryDep``s); extern kernels and named views
are ``ExternNode``s (never fused, but they order the graph). A ``FusedGroup`` is a candidate
kernel or one extern step. ``node_dependencies`` gives the node-level edges the scheduler orders
and checks cycles by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy

from ._simplify import simplify_index
from .indexing import index_symbol
from .ir import Buffer, ComputedBuffer, ExternKernel, NamedView, product
from .loop_body import iteration_order, iteration_ranges


@dataclass(frozen=True)
class MemoryDep:
    """A read or write of buffer ``name`` at ``index`` over an iteration space of ``size``."""

    name: str
    index: sympy.Expr
    size: tuple[sympy.Expr, ...]


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


def node_dependencies(nodes: Sequence[Any]) -> tuple[list[set[int]], list[set[int]]]:
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
