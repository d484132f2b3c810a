"""From fused groups to backend steps: ``KernelSpec``s, ``ExternCall``s and ``View``s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sympy
import torch.utils._pytree as pytree

from ._simplify import simplify_index
from .backend import BufferRef, BufferSpec, ExternCall, KernelNode, KernelSpec, KernelStage, View
from .handlers import WrapperHandler
from .indexing import ROW_PROGRAM, index_symbol
from .ir import Buffer, ExternKernel, NamedView
from .ops import current_ops_handler, set_ops_handler
from .scheduler import ExternNode, FusedGroup, GroupPlan, PlannedNode


def _is_index_var(sym: sympy.Symbol) -> bool:
    return sym.name[:1] in ("x", "r") or sym.name.startswith("tmp_ind") or sym == ROW_PROGRAM


class _SimplifyingHandler(WrapperHandler):
    """Forwards every op to ``inner``, simplifying index expressions on the way.

    Reshapes and flattened iteration spaces compute indices with FloorDiv/ModularIndexing that
    often collapse given the kernel's ranges; code generators match a
    local buffer's load to its store by the index expression, so both must be in simplest form.
    """

    def __init__(self, inner: Any, ranges: Mapping[sympy.Symbol, sympy.Expr]) -> None:
        super().__init__(inner)
        self._ranges = ranges

    def _s(self, index: Any) -> Any:
        return simplify_index(sympy.sympify(index), self._ranges)

    def load(self, name, index):
        return self._inner.load(name, self._s(index))

    def store(self, name, index, value, mode=None):
        return self._inner.store(name, self._s(index), value, mode)

    def store_reduction(self, name, index, value):
        return self._inner.store_reduction(name, self._s(index), value)

    def index_expr(self, expr, dtype):
        return self._inner.index_expr(self._s(expr), dtype)


def _node_body(p: PlannedNode, xranges: Sequence[sympy.Expr], rranges: Sequence[sympy.Expr]):
    nx, nr = len(xranges), len(rranges)
    kxs = [index_symbol("x", i) for i in range(nx)]
    krs = [index_symbol("r", i) for i in range(nr)]
    xs, rs = p.xs_map
    node = p.node

    def body(xvars, rvars):
        sub = dict(zip(kxs, xvars))
        sub.update(zip(krs, rvars))
        nxs = [sympy.sympify(e).xreplace(sub) for e in xs]
        nrs = [sympy.sympify(e).xreplace(sub) for e in rs]
        ranges = dict(zip(xvars, xranges))
        ranges.update(zip(rvars, rranges))
        with set_ops_handler(_SimplifyingHandler(current_ops_handler(), ranges)):
            node.body_in(nxs, nrs)

    return body


def kernel_spec(
    name: str,
    group: FusedGroup,
    plan: GroupPlan,
    buffers: Mapping[str, BufferSpec],
    needed_outside: set[str],
) -> KernelSpec:
    """The KernelSpec of a legal group; ``needed_outside`` are buffers read after the kernel."""
    stages = []
    reads: list[str] = []
    writes: list[str] = []
    exprs: list[sympy.Expr] = list(plan.xranges) + list(plan.rranges)
    for kind, planned in plan.stages:
        nodes = []
        for p in planned:
            nodes.append(
                KernelNode(
                    p.node.name,
                    _node_body(p, plan.xranges, plan.rranges),
                    p.node.is_reduction,
                    p.node.buf.origin,
                    p.across_rows,
                )
            )
            for d in p.reads:
                if d.name not in writes and d.name not in reads:
                    reads.append(d.name)
                exprs.append(d.index)
            for d in p.writes:
                writes.append(d.name)
                exprs.append(d.index)
            exprs.extend(p.exprs)
        stages.append(KernelStage(kind, tuple(nodes)))
    for p_ in (p for _, ps in plan.stages for p in ps):
        if p_.node.is_scatter and p_.node.buf.write_name not in reads:
            reads.append(p_.node.buf.write_name)  # updated in place: passed in, not allocated
    outputs = tuple(w for w in writes if w in needed_outside)
    local = frozenset(w for w in writes if w not in needed_outside)
    used = {n: buffers[n] for n in reads + writes}
    for b in used.values():
        exprs.extend(b.size)
        exprs.extend(b.stride)
    unique = {sympy.sympify(e) for e in exprs}
    free = set().union(*(e.free_symbols for e in unique if not e.is_number))
    size_args = tuple(sorted((s for s in free if not _is_index_var(s)), key=lambda s: s.name))
    return KernelSpec(
        name,
        plan.xranges,
        plan.rranges,
        tuple(stages),
        used,
        tuple(reads),
        outputs,
        local,
        size_args,
        plan.row_programs,
    )


def _ref(x: Any) -> Any:
    if isinstance(x, (Buffer, NamedView)):
        return BufferRef(x.name)
    return x


def extern_step(node: ExternNode) -> ExternCall | View:
    ir = node.node
    if isinstance(ir, NamedView):
        lay = ir.view.layout
        return View(ir.name, ir.view.base.name, lay.size, lay.stride, lay.offset)
    assert isinstance(ir, ExternKernel)
    args, kwargs = pytree.tree_map(_ref, (ir.args, ir.kwargs))
    outs = tuple(b.name if b is not None else "" for b in ir.outputs)
    return ExternCall(
        ir.op, tuple(args), dict(kwargs), outs, kind=ir.kind, reason=ir.reason, scalars=ir.scalars
    )


def steps_for(
    groups: Sequence[FusedGroup],
    plans: Mapping[int, GroupPlan],
    buffers: Mapping[str, BufferSpec],
    graph_outputs: set[str],
) -> list[Any]:
    """Steps in order; a kernel's outputs are the buffers read by a later step or returned."""
    last_read: dict[str, int] = {}  # buffer -> index of the last group reading it
    for i, g in enumerate(groups):
        for n in g.nodes:
            for name in n.read_names:
                last_read[name] = i
    steps: list[Any] = []
    kernels = 0
    for i, g in enumerate(groups):
        if g.is_extern:
            steps.append(extern_step(g.nodes[0]))
            continue
        later = {w for w in g.write_names if w in graph_outputs or last_read.get(w, -1) > i}
        steps.append(kernel_spec(f"kernel{kernels}", g, plans[id(g)], buffers, later))
        kernels += 1
    return steps
