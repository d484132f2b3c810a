"""The control-flow graph of a code object, built once: basic blocks, their successors, and the
exception table in instruction indices with each entry's stack depth.

Everything that follows control through bytecode reads it: liveness (``liveness.py``), the ways a
break's instruction may continue (``breaks.py``), and the except-clause analysis of continuation
codegen (``resume.py``). Instructions are ``decode``'s (normalised spellings, jump targets as
instruction indices), so nothing here depends on the Python version.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from .decode import Instr, decode

#: instructions control never falls through from (in ``decode``'s spelling: 3.11's
#: JUMP_BACKWARD_NO_INTERRUPT is JUMP_BACKWARD by then)
NO_FALLTHROUGH = frozenset(
    {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD", "JUMP_BACKWARD"}
)


def exits(inst: Instr) -> list[tuple[bool, int]]:
    """(is the jump, next index) for each way control leaves ``inst`` normally (not by raising):
    falling through to the next instruction, then its jump target."""
    out = []
    if inst.opname not in NO_FALLTHROUGH:
        out.append((False, inst.index + 1))
    if inst.target is not None:
        out.append((True, inst.target))
    return out


@dataclass(frozen=True)
class ExceptionEntry:
    """One entry of the exception table: instructions ``first`` to ``end - 1`` raise into
    ``handler`` with the stack cut to ``depth`` slots (plus the raising offset when ``lasti``)."""

    first: int
    end: int
    handler: int
    depth: int
    lasti: bool

    def covers(self, index: int) -> bool:
        return self.first <= index < self.end


@dataclass(frozen=True)
class Block:
    """Instructions ``start`` to ``end - 1``, entered only at ``start``; ``successors`` (block
    indices) where normal flow goes after its last instruction; ``handler`` (a block index, or
    None) where every instruction of it raises into."""

    start: int
    end: int
    successors: tuple[int, ...]
    handler: int | None


@dataclass(frozen=True, eq=False)
class FlowGraph:
    insts: tuple[Instr, ...]
    entries: tuple[ExceptionEntry, ...]
    blocks: tuple[Block, ...]
    block_of: tuple[int, ...]  # instruction index -> its block's index
    #: handler instruction index -> the stack depth of the exception-table entries raising into it
    handler_depth: Mapping[int, int]

    def successors(self, index: int) -> list[int]:
        """Indices control may reach next from instruction ``index`` (exception handlers excluded)."""
        out: list[int] = []
        for _, nxt in exits(self.insts[index]):
            if nxt < len(self.insts) and nxt not in out:
                out.append(nxt)
        return out

    def covering(self, index: int) -> ExceptionEntry | None:
        """The exception-table entry covering instruction ``index`` (entries never overlap)."""
        return next((e for e in self.entries if e.covers(index)), None)

    def handler_of(self, index: int) -> int | None:
        """The first instruction of the handler ``index`` raises into, or None."""
        block = self.blocks[self.block_of[index]]
        return None if block.handler is None else self.blocks[block.handler].start


def _entries(
    insts: tuple[Instr, ...], code: types.CodeType
) -> tuple[list[ExceptionEntry], dict[int, int]]:
    by_offset = {i.offset: i.index for i in insts}
    entries, depth = [], {}
    for entry in dis.Bytecode(code).exception_entries:
        handler = by_offset.get(entry.target)
        if handler is None:
            continue
        depth[handler] = entry.depth
        covered = [i.index for i in insts if entry.start <= i.offset < entry.end]
        if covered:
            entries.append(
                ExceptionEntry(covered[0], covered[-1] + 1, handler, entry.depth, entry.lasti)
            )
    return entries, depth


@lru_cache(maxsize=1024)
def flow_graph(code: types.CodeType) -> FlowGraph:
    """The control-flow graph of ``code`` (cached per code object)."""
    insts = decode(code)
    n = len(insts)
    entries, depth = _entries(insts, code)
    # a block starts at the entry, at every jump target and handler, after every jump or exit,
    # and where an exception-table entry starts or ends (so one handler covers a whole block)
    leaders = {0}
    for inst in insts:
        if inst.target is not None:
            leaders.add(inst.target)
        if inst.target is not None or inst.opname in NO_FALLTHROUGH:
            leaders.add(inst.index + 1)
    for e in entries:
        leaders.update((e.first, e.end, e.handler))
    starts = sorted(i for i in leaders if 0 <= i < n)
    ends = starts[1:] + [n]
    block_of = [0] * n
    for b, (start, end) in enumerate(zip(starts, ends)):
        block_of[start:end] = [b] * (end - start)
    blocks = []
    for start, end in zip(starts, ends):
        nexts = []
        for _, nxt in exits(insts[end - 1]):
            if nxt < n and block_of[nxt] not in nexts:
                nexts.append(block_of[nxt])
        entry = next((e for e in entries if e.covers(start)), None)
        blocks.append(
            Block(start, end, tuple(nexts), None if entry is None else block_of[entry.handler])
        )
    return FlowGraph(insts, tuple(entries), tuple(blocks), tuple(block_of), depth)


__all__ = ["NO_FALLTHROUGH", "Block", "ExceptionEntry", "FlowGraph", "exits", "flow_graph"]
