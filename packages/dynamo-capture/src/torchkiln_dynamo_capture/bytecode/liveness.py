"""Which local variables are live (may be read before being written) at each instruction.

A continuation function receives only the locals it can still read: dead values would cost
guards (and recompiles when they change) for nothing. Classic backward dataflow over the decoded
instructions; the exception table adds edges from each covered instruction to its handler.
"""

from __future__ import annotations

import dis
import types
from functools import lru_cache

from .decode import decode

_READS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_CLOSURE", "LOAD_DEREF", "DELETE_DEREF"}
_WRITES = {"STORE_FAST", "DELETE_FAST", "STORE_DEREF"}
_NO_FALLTHROUGH = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD",
                   "JUMP_ABSOLUTE", "JUMP"}


def successors(code: types.CodeType, index: int) -> list[int]:
    """Indices control may reach next from instruction ``index`` (exception handlers excluded)."""
    insts = decode(code)
    inst = insts[index]
    out = []
    if inst.opname not in _NO_FALLTHROUGH and index + 1 < len(insts):
        out.append(index + 1)
    if inst.target is not None and inst.target not in out:
        out.append(inst.target)
    return out


def handler_edges(code: types.CodeType) -> dict[int, int]:
    """instruction index -> index of the exception handler covering it."""
    insts = decode(code)
    by_offset = {i.offset: i.index for i in insts}
    edges: dict[int, int] = {}
    for entry in dis.Bytecode(code).exception_entries:
        target = by_offset.get(entry.target)
        if target is None:
            continue
        for i in insts:
            if entry.start <= i.offset < entry.end:
                edges[i.index] = target
    return edges


@lru_cache(maxsize=1024)
def live_in(code: types.CodeType) -> tuple[frozenset, ...]:
    """For each instruction index, the local (and cell) names that may be read before written."""
    insts = decode(code)
    n = len(insts)
    handlers = handler_edges(code)
    succ = []
    for i in range(n):
        s = successors(code, i)
        if i in handlers:
            s.append(handlers[i])
        succ.append(s)
    live = [frozenset()] * n
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            inst = insts[i]
            out: set = set()
            for s in succ[i]:
                out |= live[s]
            if inst.opname in _WRITES and inst.opname != "STORE_DEREF":
                out.discard(inst.argval)
            if inst.opname in _READS:
                out.add(inst.argval)
            new = frozenset(out)
            if new != live[i]:
                live[i] = new
                changed = True
    return tuple(live)
