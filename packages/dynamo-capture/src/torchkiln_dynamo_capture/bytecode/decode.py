"""Decode a code object into a list of normalised instructions.

Version quirks are normalised here, once: opcode renames (3.11's POP_JUMP_FORWARD_IF_TRUE and
3.12's POP_JUMP_IF_TRUE both become POP_JUMP_IF_TRUE), jump targets become instruction indices
(3.11 and 3.12 encode relative/absolute deltas differently; ``dis`` resolves them to offsets), and
behaviour flags that differ by version live in one ``VersionTable``.
"""

from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any


@dataclass(frozen=True)
class VersionTable:
    """What differs between the CPython versions we translate."""

    #: FOR_ITER on exhaustion skips the END_FOR at its target (3.12) instead of landing on it.
    for_iter_skips_end_for: bool
    #: opnames renamed to a common spelling.
    renames: tuple[tuple[str, str], ...]
    #: CALL is preceded by PRECALL (3.11).
    precall: bool
    #: list/dict/set comprehensions run as functions of their own (3.11; 3.12 inlines them, PEP 709).
    comprehension_frames: bool
    #: LOAD_ATTR's low bit asks for the method form, pushing [NULL or meth, attr] (3.12).
    load_attr_method_flag: bool
    #: the forward spelling of each backward jump (3.11 spells the direction in conditional jumps).
    forward_jumps: tuple[tuple[str, str], ...]
    #: the instructions that prepare a CALL and form one group with it (a break splits before the
    #: group): 3.11's KW_NAMES and PRECALL, 3.12's KW_NAMES.
    call_prefix: frozenset[str] = frozenset({"KW_NAMES"})
    #: SEND on an exhausted receiver replaces the receiver by the result (3.11) instead of
    #: leaving it for the END_SEND at its target (3.12).
    send_pops_receiver: bool = False


_RENAMES_311 = (
    ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_IF_TRUE"),
    ("POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_IF_TRUE"),
    ("POP_JUMP_FORWARD_IF_FALSE", "POP_JUMP_IF_FALSE"),
    ("POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_IF_FALSE"),
    ("POP_JUMP_FORWARD_IF_NONE", "POP_JUMP_IF_NONE"),
    ("POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_IF_NONE"),
    ("POP_JUMP_FORWARD_IF_NOT_NONE", "POP_JUMP_IF_NOT_NONE"),
    ("POP_JUMP_BACKWARD_IF_NOT_NONE", "POP_JUMP_IF_NOT_NONE"),
    ("JUMP_BACKWARD_NO_INTERRUPT", "JUMP_BACKWARD"),
    ("LOAD_METHOD", "LOAD_METHOD"),
)
_RENAMES_312 = (
    ("JUMP_BACKWARD_NO_INTERRUPT", "JUMP_BACKWARD"),
    ("LOAD_FAST_CHECK", "LOAD_FAST"),
)
_FORWARD_312 = (
    ("JUMP_BACKWARD", "JUMP_FORWARD"),
    ("JUMP_BACKWARD_NO_INTERRUPT", "JUMP_FORWARD"),
)
_FORWARD_311 = (
    ("POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_TRUE"),
    ("POP_JUMP_BACKWARD_IF_FALSE", "POP_JUMP_FORWARD_IF_FALSE"),
    ("POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_FORWARD_IF_NONE"),
    ("POP_JUMP_BACKWARD_IF_NOT_NONE", "POP_JUMP_FORWARD_IF_NOT_NONE"),
    *_FORWARD_312,
)


@cache
def version_table(version: tuple[int, int] | None = None) -> VersionTable:
    version = version or sys.version_info[:2]
    if version == (3, 11):
        return VersionTable(
            for_iter_skips_end_for=False,
            renames=_RENAMES_311,
            precall=True,
            comprehension_frames=True,
            load_attr_method_flag=False,
            forward_jumps=_FORWARD_311,
            send_pops_receiver=True,
            call_prefix=frozenset({"KW_NAMES", "PRECALL"}),
        )
    elif version == (3, 12):
        return VersionTable(
            for_iter_skips_end_for=True,
            renames=_RENAMES_312,
            precall=False,
            comprehension_frames=False,
            load_attr_method_flag=True,
            forward_jumps=_FORWARD_312,
        )
    else:
        raise NotImplementedError(
            f"torchkiln capture supports CPython 3.11 and 3.12, not {version}"
        )


@dataclass(frozen=True)
class Instr:
    """One instruction: ``target`` is the jump target's index in the decoded list (or None)."""

    index: int
    opname: str
    arg: int | None
    argval: Any
    argrepr: str
    offset: int
    lineno: int | None
    target: int | None
    opcode: int = 0  # the real opcode (``opname`` may be a normalised spelling)


_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)


@lru_cache(maxsize=4096)
def decode(code: types.CodeType) -> tuple[Instr, ...]:
    table = version_table()
    renames = dict(table.renames)
    every = list(dis.get_instructions(code))
    raw = [i for i in every if i.opname not in ("CACHE", "EXTENDED_ARG")]
    by_offset = {i.offset: n for n, i in enumerate(raw)}
    # a jump may land on the EXTENDED_ARG prefix of its target: map it to the real instruction
    pending = []
    for i in every:
        if i.opname == "EXTENDED_ARG":
            pending.append(i.offset)
        elif i.offset in by_offset:
            for off in pending:
                by_offset[off] = by_offset[i.offset]
            pending = []
    out = []
    lineno = code.co_firstlineno
    for n, i in enumerate(raw):
        ln = (
            i.positions.lineno
            if i.positions is not None and i.positions.lineno is not None
            else None
        )
        lineno = ln if ln is not None else lineno
        target = by_offset.get(i.argval) if i.opcode in _JUMPS else None
        argval = i.argval
        if (
            i.opname == "KW_NAMES"
        ):  # 3.11's dis leaves it unresolved: the names tuple is co_consts[arg]
            argval = code.co_consts[i.arg]
        out.append(
            Instr(
                n,
                renames.get(i.opname, i.opname),
                i.arg,
                argval,
                i.argrepr,
                i.offset,
                lineno,
                target,
                i.opcode,
            )
        )
    return tuple(out)
