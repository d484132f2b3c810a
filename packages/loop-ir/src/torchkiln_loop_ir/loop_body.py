"""The recorded loop body: a realized buffer's ops, captured once, replayed under any handler.

A ``ComputedBuffer``'s body (``store_body``) is a closure over the lowering's loaders: calling it
under an ops handler runs the Python of every producer inlined into it again, rebuilding the same
index expressions in sympy. The scheduler (reads and writes, then once more per candidate kernel),
memory planning and the code generators (their analyses, then the emission) each did that.
A ``LoopBody`` runs the closure once, under a recording handler, and keeps what it called:

- ``xvars``/``rvars``: its iteration variables ``x0..``/``r0..``, one per dimension of size other
  than 1 (``iteration_ranges``), in iteration order: a pointwise buffer laid out in another order
  than its logical dims (channels-last) iterates in memory order (``iteration_order``), so that
  its innermost loop walks unit stride. Dimensions of size 1 are index 0.
- ``ops``: one ``LoopBodyOp`` per call, in call order: the name of its result (``tmp3``; a Welford
  reduction's parts are ``tmp3[0]``..``tmp3[2]``; an indirect index is the sympy symbol
  ``tmp_ind0``, as ``NoOpHandler`` names them), the op, and its arguments: ``Value``s (results of
  earlier ops), sympy expressions over the variables, dtypes and constants; ``masked``'s body is a
  nested ``Block`` of the ops it ran and the value it returned.
- ``reads``, ``writes``, ``exprs`` (what ``index_expr`` and indirect sizes compute with),
  ``reduction_types``, ``num_loads``/``num_ops``: read off the list, no handler run.
- ``body(xs, rs)``: the ops replayed, in order, under the installed handler, with every variable
  replaced by the given index (``xreplace``, all at once) and each indirect symbol by the one the
  handler returned; the code generators emit from it. ``accesses(xs, rs)`` is the reads, writes
  and expressions at other indices without a handler.
- ``str(body)``: the ops one a line, ``tmp1 = ops.add(tmp0, tmp0)``.

The recording is exact where the closure's Python does not branch on index values: lowerings
decide on sizes and dtypes (known when the closure is made), and call ops; an index value only
flows into sympy arithmetic, which ``xreplace`` rebuilds (running ``FloorDiv``'s and
``ModularIndexing``'s simplification on the new arguments).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from .handlers import NoOpHandler
from .indexing import index_symbol
from .ir import ComputedBuffer
from .ops import ops, set_ops_handler


@dataclass(frozen=True)
class Value:
    """The result of an earlier op of the body (``item``: one part of a Welford reduction)."""

    name: str
    item: int | None = None

    def __str__(self) -> str:
        return self.name if self.item is None else f"{self.name}[{self.item}]"


@dataclass(frozen=True)
class Block:
    """The ops a ``masked`` body ran, and the value it returned."""

    ops: tuple[LoopBodyOp, ...]
    result: Any


@dataclass(frozen=True)
class LoopBodyOp:
    """``out = ops.<name>(*args, **kwargs)``; ``out`` is "" for the stores, the index symbol for
    ``indirect_indexing``."""

    out: str | sympy.Symbol
    name: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        parts = [_fmt(a) for a in self.args] + [f"{k}={_fmt(v)}" for k, v in self.kwargs]
        call = f"ops.{self.name}({', '.join(parts)})"
        return f"{self.out} = {call}" if self.out != "" else call


def _fmt(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, (Value, sympy.Basic)):
        return str(value)
    if isinstance(value, Block):
        return f"<masked body: {len(value.ops)} ops -> {_fmt(value.result)}>"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_fmt(v) for v in value)
        return (
            f"({inner}{',' if len(value) == 1 else ''})"
            if isinstance(value, tuple)
            else f"[{inner}]"
        )
    return repr(value)


def _drop_ones(sizes: Sequence[sympy.Expr]) -> tuple[sympy.Expr, ...]:
    return tuple(s for s in sizes if s != 1)


def iteration_order(buf: ComputedBuffer) -> tuple[int, ...] | None:
    """The non-size-1 dims of a pointwise buffer, outermost first by stride, when its layout is
    not the logical order (static strides only); None otherwise."""
    if buf.is_reduction or buf.is_scatter:
        return None
    size, stride = tuple(buf.layout.size), tuple(buf.layout.stride)
    if size != tuple(buf.ranges) or len(stride) != len(size):
        return None
    dims = [d for d, s in enumerate(size) if s != 1]
    if not all(isinstance(stride[d], (int, sympy.Integer)) for d in dims):
        return None
    order = sorted(range(len(dims)), key=lambda k: -int(stride[dims[k]]))
    return tuple(order) if order != list(range(len(dims))) else None


def iteration_ranges(buf: ComputedBuffer) -> tuple[tuple[sympy.Expr, ...], tuple[sympy.Expr, ...]]:
    """The (x, r) ranges a body of ``buf`` iterates over: sizes other than 1, x in
    ``iteration_order``; a reduction over size-1 dims only has r range ``(1,)``."""
    xr = _drop_ones(buf.ranges)
    perm = iteration_order(buf)
    if perm is not None:
        xr = tuple(xr[d] for d in perm)
    rr: tuple[sympy.Expr, ...] = ()
    if buf.is_reduction:
        rr = _drop_ones(buf.reduction_ranges) or (sympy.Integer(1),)
    return xr, rr


class _Recording(NoOpHandler):
    """Appends each op called to the innermost open block; results are ``Value``s."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: list[list[LoopBodyOp]] = [[]]
        self._count = 0

    def _fresh(self) -> str:
        self._count += 1
        return f"tmp{self._count - 1}"

    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = "" if name in ("store", "store_reduction") else self._fresh()
        self._blocks[-1].append(LoopBodyOp(out, name, tuple(args), tuple(kwargs.items())))
        return Value(out) if out else None

    def reduction(self, dtype: Any, src_dtype: Any, reduction_type: str, value: Any) -> Any:
        out = self.default("reduction", (dtype, src_dtype, reduction_type, value), {})
        if reduction_type.startswith("welford"):  # (mean, m2, weight), as the contract says
            return tuple(Value(out.name, i) for i in range(3))
        return out

    def masked(self, mask: Any, body: Callable[[], Any], other: Any) -> Any:
        self._blocks.append([])
        try:
            result = body()
        finally:
            inner = self._blocks.pop()
        out = self._fresh()
        self._blocks[-1].append(
            LoopBodyOp(out, "masked", (mask, Block(tuple(inner), result), other))
        )
        return Value(out)

    def indirect_indexing(self, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
        sym = super().indirect_indexing(value, size, check)
        self._blocks[-1].append(LoopBodyOp(sym, "indirect_indexing", (value, size, check)))
        return sym


def _walk(block: Sequence[LoopBodyOp]):
    for op in block:
        yield op
        if op.name == "masked":
            yield from _walk(op.args[1].ops)


class LoopBody:
    """A body recorded once (see the module docstring); call it to replay it."""

    def __init__(
        self,
        xvars: Sequence[sympy.Symbol],
        rvars: Sequence[sympy.Symbol],
        ops_: Sequence[LoopBodyOp],
    ) -> None:
        self.xvars = tuple(xvars)
        self.rvars = tuple(rvars)
        self.ops = tuple(ops_)
        reads: list[tuple[str, Any]] = []
        writes: list[tuple[str, Any]] = []
        exprs: list[Any] = []
        types: list[str] = []
        self.num_loads = self.num_ops = 0
        for op in _walk(self.ops):
            if op.name in ("load", "load_seed"):
                reads.append((op.args[0], op.args[1]))
            elif op.name in ("store", "store_reduction"):
                writes.append((op.args[0], op.args[1]))
            elif op.name == "index_expr":
                exprs.append(op.args[0])
            elif op.name == "indirect_indexing":
                exprs.append(op.args[1])
            elif op.name == "reduction":
                types.append(op.args[2])
            if op.name == "load":
                self.num_loads += 1
            elif op.name not in ("indirect_indexing",):
                self.num_ops += 1
        #: (buffer, index) of every load (and seed load) and store, in call order, over the
        #: body's own variables; indices as the closure passed them
        self.reads: tuple[tuple[str, Any], ...] = tuple(reads)
        self.writes: tuple[tuple[str, Any], ...] = tuple(writes)
        self.exprs: tuple[Any, ...] = tuple(exprs)
        self.reduction_types: tuple[str, ...] = tuple(types)
        self.read_names = frozenset(n for n, _ in reads)
        self.write_names = frozenset(n for n, _ in writes)

    @classmethod
    def record(cls, fn: Callable[[list[Any], list[Any]], Any], nx: int, nr: int) -> LoopBody:
        """Run ``fn(xvars, rvars)`` once under a recording handler."""
        xvars = [index_symbol("x", i) for i in range(nx)]
        rvars = [index_symbol("r", i) for i in range(nr)]
        # abstract to mypy only: the ops are set on DefaultHandler at import (handlers.py)
        rec = _Recording()  # type: ignore[abstract]
        with set_ops_handler(rec):
            fn(list(xvars), list(rvars))
        return cls(xvars, rvars, rec._blocks[0])

    @classmethod
    def of(cls, buf: ComputedBuffer) -> LoopBody:
        """``buf``'s store body over its ``iteration_ranges`` (size-1 dims at index 0)."""
        xr, rr = iteration_ranges(buf)
        perm = iteration_order(buf)
        store = buf.store_body()
        ranges, rranges = buf.ranges, buf.reduction_ranges
        reduces_over = bool(_drop_ones(rranges)) if buf.is_reduction else False

        def full(sizes, vals):
            it = iter(vals)
            return [sympy.Integer(0) if s == 1 else next(it) for s in sizes]

        def run(xs, rs):
            if perm is not None:  # back from memory order to the logical dims
                logical: list[Any] = [None] * len(xs)
                for k, d in enumerate(perm):
                    logical[d] = xs[k]
                xs = logical
            rfull = full(rranges, rs) if reduces_over else [sympy.Integer(0)] * len(rranges)
            store(full(ranges, xs), rfull)

        return cls.record(run, len(xr), len(rr))

    # -- replay ---------------------------------------------------------------------------------
    def substitution(self, xs: Sequence[Any], rs: Sequence[Any]) -> dict[sympy.Symbol, Any]:
        """Variable -> index, leaving out the variables that stay themselves."""
        sub = {v: sympy.sympify(e) for v, e in zip(self.xvars, xs) if e is not v}
        sub.update((v, sympy.sympify(e)) for v, e in zip(self.rvars, rs) if e is not v)
        return {v: e for v, e in sub.items() if e != v}

    def __call__(self, xs: Sequence[Any], rs: Sequence[Any] = ()) -> None:
        """Replay the ops under the installed handler at indices ``xs``/``rs``."""
        self._run(self.ops, self.substitution(xs, rs), {})

    def _run(self, block: Sequence[LoopBodyOp], sub: dict, env: dict) -> None:
        for op in block:
            if op.name == "masked":
                mask, inner, other = op.args

                def body(inner=inner):
                    self._run(inner.ops, sub, env)
                    return self._arg(inner.result, sub, env)

                env[op.out] = ops.masked(
                    self._arg(mask, sub, env), body, self._arg(other, sub, env)
                )
                continue
            args = [self._arg(a, sub, env) for a in op.args]
            kwargs = {k: self._arg(v, sub, env) for k, v in op.kwargs}
            result = getattr(ops, op.name)(*args, **kwargs)
            if op.name == "indirect_indexing":
                sub[op.out] = result  # later indices use the handler's symbol
            elif op.out != "":
                env[op.out] = result

    @staticmethod
    def _arg(a: Any, sub: dict, env: dict) -> Any:
        if isinstance(a, Value):
            v = env[a.name]
            return v if a.item is None else v[a.item]
        if isinstance(a, sympy.Basic):
            return a.xreplace(sub) if sub else a
        if isinstance(a, tuple):
            return tuple(LoopBody._arg(x, sub, env) for x in a)
        if isinstance(a, list):
            return [LoopBody._arg(x, sub, env) for x in a]
        return a

    def accesses(
        self, xs: Sequence[Any], rs: Sequence[Any]
    ) -> tuple[list[tuple[str, sympy.Expr]], list[tuple[str, sympy.Expr]], list[sympy.Expr]]:
        """(reads, writes, exprs) at indices ``xs``/``rs`` (sympified), without a handler:
        what a recording handler sees when the body is replayed there."""
        sub = self.substitution(xs, rs)

        def at(e: Any) -> sympy.Expr:
            e = sympy.sympify(e)
            return e.xreplace(sub) if sub else e

        return (
            [(n, at(i)) for n, i in self.reads],
            [(n, at(i)) for n, i in self.writes],
            [at(e) for e in self.exprs],
        )

    # -- printing -------------------------------------------------------------------------------
    def lines(self, indent: str = "") -> list[str]:
        out: list[str] = []

        def emit(block: Sequence[LoopBodyOp], pad: str) -> None:
            for op in block:
                if op.name == "masked":
                    mask, inner, other = op.args
                    out.append(f"{pad}with ops.masked({_fmt(mask)}, other={_fmt(other)}):")
                    emit(inner.ops, pad + "    ")
                    out.append(f"{pad}{op.out} = masked_result({_fmt(inner.result)})")
                else:
                    out.append(pad + str(op))

        emit(self.ops, indent)
        return out

    def __str__(self) -> str:
        head = ", ".join(map(str, self.xvars + self.rvars))
        return "\n".join([f"LoopBody({head}):", *self.lines("    ")])

    def __repr__(self) -> str:
        return f"<LoopBody {len(self.ops)} ops, reads {sorted(self.read_names)}, writes {sorted(self.write_names)}>"
