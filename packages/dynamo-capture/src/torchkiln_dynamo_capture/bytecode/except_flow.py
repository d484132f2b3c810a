"""Exception flow: the except clauses an instruction may raise into, and the region each covers.

A graph break whose instruction raises into a handler of its own frame hands the clause's body to a
continuation (see ``resume.py``): the step, a copy of the original code, runs the handler's matching
part in CPython (PUSH_EXC_INFO, which makes the exception the one being handled and pushes the one
handled before; the CHECK_EXC_MATCH tests; the POP_TOP or ``as e`` store of the exception), and at
the clause's *body* a tail hands the stack and the live locals to ``resume_at_<body>``.

The clause's normal exit, POP_EXCEPT (restore the exception handled before), is a thread-state
effect capture cannot model, and a break there would cut the graph. So continuations that start
inside a clause body run POP_TOP there instead (``clause_exits``). Nothing captured can see which
exception is being handled, only Python can: the continuation restores it before handing a later
break to its step (``handled_slot``), and the catching step's tail restores it when the
continuation returns or raises.

Control flow (the exception table with its depths, where an instruction goes next) is ``flow.py``'s;
the walks here follow it instruction by instruction because they track the stack depth.
"""

from __future__ import annotations

import dis
import functools
import types
from dataclasses import dataclass

from .flow import ExceptionEntry, FlowGraph, exits, flow_graph

_RAISES = {"RERAISE", "RAISE_VARARGS"}
_STORES = {"STORE_FAST", "STORE_DEREF"}


@dataclass(frozen=True)
class ExceptClause:
    """A handler path at the point it has taken the exception off the stack: ``body`` (its first
    instruction) runs with the try region's ``depth`` stack slots, the saved instruction offset when
    the table entry has ``lasti``, and the exception handled before on top; ``binds`` are the locals
    the match stored (``except E as e``)."""

    body: int
    depth: int
    lasti: bool
    binds: tuple[str, ...]


def _effect(inst, jump: bool) -> int:
    return dis.stack_effect(
        inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None, jump=jump
    )


def _walk_handler(graph: FlowGraph, entry: ExceptionEntry) -> tuple[list[ExceptClause], list[int]]:
    """The clauses of the handler of ``entry`` (none unless it starts with PUSH_EXC_INFO: a cleanup
    only restores and re-raises) and the instructions of its normal flow that raise again (no
    clause matched, a cleanup, a ``with`` whose ``__exit__`` did not suppress)."""
    insts = graph.insts
    handler, depth, lasti = entry.handler, entry.depth, entry.lasti
    base = depth + int(lasti)
    clauses, raises = [], []
    is_except = insts[handler].opname == "PUSH_EXC_INFO"
    todo, seen = [(handler, base + 1, ())], set()
    while todo:
        i, d, binds = todo.pop()
        if i in seen or i >= len(insts):
            continue
        seen.add(i)
        inst = insts[i]
        if inst.opname == "CHECK_EG_MATCH":  # except*: the exception group is split, not popped
            return [], []
        if inst.opname in _RAISES:
            raises.append(i)
            continue
        stored = (inst.argval,) if inst.opname in _STORES else ()
        for jump, nxt in exits(inst):
            after = d + _effect(inst, jump)
            if is_except and d == base + 2 and after == base + 1:
                clauses.append(ExceptClause(nxt, depth, lasti, binds + stored))
            else:
                todo.append((nxt, after, binds + stored))
    return clauses, raises


@functools.lru_cache(maxsize=1024)
def clauses_reached(code: types.CodeType, index: int) -> tuple[ExceptClause, ...]:
    """The except clauses control may reach when instruction ``index`` raises: its handler's, and
    those of the handlers outer clauses re-raise to (a clause that does not match, a cleanup)."""
    graph = flow_graph(code)
    out: list[ExceptClause] = []
    todo, seen = [graph.covering(index)], set()
    while todo:
        entry = todo.pop()
        if entry is None or entry.handler in seen:
            continue
        seen.add(entry.handler)
        clauses, raises = _walk_handler(graph, entry)
        out += [c for c in clauses if c not in out]
        todo += [graph.covering(i) for i in raises]
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def clause_regions(code: types.CodeType) -> tuple[tuple[ExceptClause, frozenset, frozenset], ...]:
    """Each clause with its body (what runs while it handles: from ``body`` to its exits, nested
    handlers included) and its exits (the POP_EXCEPTs that leave it normally)."""
    graph = flow_graph(code)
    insts = graph.insts
    out = []
    for entry in graph.entries:
        for clause in _walk_handler(graph, entry)[0]:
            body: set[int] = set()
            ends: set[int] = set()
            todo, seen = [(clause.body, 0)], set()  # level: nested handlers entered and not left
            while todo:
                i, level = todo.pop()
                if (i, level) in seen or i >= len(insts):
                    continue
                seen.add((i, level))
                body.add(i)
                inst = insts[i]
                if inst.opname == "POP_EXCEPT":
                    if level == 0:
                        ends.add(i)
                        continue
                    level -= 1
                todo += [(nxt, level) for nxt in graph.successors(i)]
                inner = graph.handler_of(i)
                if inner is not None and insts[inner].opname == "PUSH_EXC_INFO":  # not a cleanup
                    todo.append((inner, level + 1))
            out.append((clause, frozenset(body), frozenset(ends)))
    return tuple(out)


def clause_exits(code: types.CodeType, index: int) -> frozenset[int]:
    """The POP_EXCEPTs of every clause whose body holds instruction ``index``: a continuation
    starting there pops the exception handled before at them instead of restoring it."""
    return frozenset(i for _, body, ends in clause_regions(code) if index in body for i in ends)


def handled_slot(code: types.CodeType, start: int, index: int) -> int | None:
    """For a continuation of ``code`` that started at ``start`` and breaks at ``index``: the stack
    slot (of its layout at ``start``) holding the exception that is being handled again at
    ``index``, because clauses it started inside have been left (None: none was left)."""
    left = [
        clause for clause, body, _ in clause_regions(code) if start in body and index not in body
    ]
    if not left:
        return None
    outer = min(left, key=lambda c: c.depth)
    return outer.depth + int(outer.lasti)


__all__ = ["ExceptClause", "clause_exits", "clause_regions", "clauses_reached", "handled_slot"]
