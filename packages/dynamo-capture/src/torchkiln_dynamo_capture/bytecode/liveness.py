"""Which local variables are live (may be read before being written) at each instruction.

A continuation function receives only the locals it can still read: dead values would cost
guards (and recompiles when they change) for nothing. Classic backward dataflow over the basic
blocks of ``flow.py``'s control-flow graph; an instruction's handler (the exception table) is a
successor of every instruction it covers.
"""

from __future__ import annotations

import types
from functools import lru_cache

from .flow import flow_graph

_READS = {
    "LOAD_FAST",
    "LOAD_FAST_CHECK",
    "LOAD_FAST_AND_CLEAR",
    "LOAD_CLOSURE",
    "LOAD_DEREF",
    "DELETE_DEREF",
}
# STORE_DEREF writes the cell's contents, not the cell: the cell itself stays live
_KILLS = {"STORE_FAST", "DELETE_FAST"}


def successors(code: types.CodeType, index: int) -> list[int]:
    """Indices control may reach next from instruction ``index`` (exception handlers excluded)."""
    return flow_graph(code).successors(index)


def handler_edges(code: types.CodeType) -> dict[int, int]:
    """instruction index -> index of the exception handler covering it."""
    graph = flow_graph(code)
    return {i: e.handler for e in graph.entries for i in range(e.first, e.end)}


@lru_cache(maxsize=1024)
def live_in(code: types.CodeType) -> tuple[frozenset, ...]:
    """For each instruction index, the local (and cell) names that may be read before written."""
    graph = flow_graph(code)
    insts, blocks = graph.insts, graph.blocks
    live: list[frozenset] = [frozenset()] * len(insts)
    changed = True
    while changed:
        changed = False
        for block in reversed(blocks):
            raised = live[blocks[block.handler].start] if block.handler is not None else frozenset()
            after: set = set(raised)
            for s in block.successors:
                after |= live[blocks[s].start]
            for i in range(block.end - 1, block.start - 1, -1):
                inst = insts[i]
                if inst.opname in _KILLS:
                    after.discard(inst.argval)
                if inst.opname in _READS:
                    after.add(inst.argval)
                new = frozenset(after)
                if new != live[i]:
                    live[i] = new
                    changed = True
                after = set(new | raised)
    return tuple(live)
