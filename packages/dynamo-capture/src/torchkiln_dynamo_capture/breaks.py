"""Graph breaks: where a frame may be split, the stack on each side of the split, and the record
``explain`` reports.

A break point is an instruction group of the top frame (3.11's KW_NAMES/PRECALL/CALL is one group)
plus how many times its first instruction had run when capture failed there: capture restarts and
stops right before that occurrence, so the graph holds exactly what came before.
"""

from __future__ import annotations

import dis
import linecache
from dataclasses import asdict, dataclass

from .bytecode.decode import version_table
from .bytecode.except_flow import ExceptClause, clauses_reached
from .bytecode.flow import exits
from .bytecode.resume import ITER, NULL, VALUE

_VT = version_table()


@dataclass(frozen=True)
class BreakPoint:
    first: int  # the group's first instruction: where the step starts
    last: int  # the instruction that failed
    occurrence: int  # how many times ``first`` had run in the frame when it failed
    in_callee: bool  # the failure was inside an inlined call: the call is the break
    #: (name, getter) when the instruction is ``obj.name`` whose @property getter broke: the step
    #: reads it through the getter captured as its own frame, as a breaking callee is
    getter: tuple | None = None


@dataclass(frozen=True)
class GraphBreak:
    """One split of a frame, as ``explain`` and ``TORCHKILN_LOGS=graph_breaks`` report it."""

    reason: str
    filename: str
    lineno: int | None
    source_line: str
    hint: str

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{self.filename}:{self.lineno}: {self.reason}{hint}\n    {self.source_line}"


#: the hint of a break whose cause has no more specific advice
DEFAULT_HINT = (
    "this line runs in Python between two graphs; move it out of the compiled function, "
    "or replace it with torch operations, to keep one graph"
)


def graph_break(reason: str, filename: str, lineno: int | None, hint: str) -> GraphBreak:
    line = linecache.getline(filename, lineno).strip() if lineno else ""
    return GraphBreak(reason, filename, lineno, line, hint or DEFAULT_HINT)


def break_point(
    insts, index: int, counts: dict, in_callee: bool, getter: tuple | None = None
) -> BreakPoint | None:
    """The break point for a failure at instruction ``index`` of the top frame (None: cannot split);
    ``getter``: a (name, fget) of a property read whose getter broke, kept for a LOAD_ATTR."""
    inst = insts[index]
    first = index
    if inst.opname == "CALL":
        while first > 0 and insts[first - 1].opname in _VT.call_prefix:
            first -= 1
    if _popped(inst) is None:
        return None
    if inst.opname != "LOAD_ATTR" or not in_callee:
        getter = None
    return BreakPoint(first, index, counts.get(first, 1), in_callee, getter)


def _popped(inst) -> int | None:
    """How many stack slots the instruction consumes (None: it may not be a break point)."""
    name, arg = inst.opname, inst.arg or 0
    if name == "CALL":
        return arg + 2
    if name == "CALL_FUNCTION_EX":
        return 3 + (arg & 1)
    if name in _POPS:
        return _POPS[name]
    if name in ("BUILD_STRING", "BUILD_TUPLE", "BUILD_LIST", "BUILD_SLICE", "RAISE_VARARGS"):
        return arg
    if name == "FORMAT_VALUE":
        return 1 + bool(arg & 0x04)
    if name == "LOAD_ATTR" and not (_VT.load_attr_method_flag and arg & 1):
        return 1  # 3.12's method form pushes [meth, self] or [NULL, attr]: not known statically
    return None


_POPS = {
    "POP_JUMP_IF_TRUE": 1,
    "POP_JUMP_IF_FALSE": 1,
    "POP_JUMP_IF_NONE": 1,
    "POP_JUMP_IF_NOT_NONE": 1,
    "JUMP_IF_TRUE_OR_POP": 1,
    "JUMP_IF_FALSE_OR_POP": 1,
    "BINARY_OP": 2,
    "COMPARE_OP": 2,
    "BINARY_SUBSCR": 2,
    "CONTAINS_OP": 2,
    "IS_OP": 2,
    "STORE_SUBSCR": 3,
    "DELETE_SUBSCR": 2,
    "STORE_ATTR": 2,
    "DELETE_ATTR": 1,
    "UNARY_NEGATIVE": 1,
    "UNARY_NOT": 1,
    "UNARY_INVERT": 1,
    "UNARY_POSITIVE": 1,
    "GET_LEN": 0,
    "BEFORE_WITH": 1,
    "UNPACK_SEQUENCE": 1,
    "UNPACK_EX": 1,
    "CALL_INTRINSIC_1": 1,
    "BINARY_SLICE": 3,
    "STORE_SLICE": 4,
    "IMPORT_NAME": 2,
    "IMPORT_FROM": 0,
    "LIST_APPEND": 1,
    "LIST_EXTEND": 1,
    "SET_ADD": 1,
    "SET_UPDATE": 1,
    "MAP_ADD": 2,
    "DICT_UPDATE": 1,
    "DICT_MERGE": 1,
    "STORE_GLOBAL": 1,
    "LOAD_GLOBAL": 0,
    "LOAD_DEREF": 0,
    "LOAD_FAST": 0,
}


def successor_layouts(
    insts, bp: BreakPoint, layout: tuple[str, ...]
) -> list[tuple[bool, int, tuple[str, ...]]]:
    """(is the jump, successor index, stack layout there) for each way the group may continue."""
    last = insts[bp.last]
    popped = _popped(last)
    kept = layout[: len(layout) - popped]
    net = sum(
        dis.stack_effect(i.opcode, i.arg if i.opcode >= dis.HAVE_ARGUMENT else None)
        for i in insts[bp.first : bp.last]
    )
    out = []
    for jump, nxt in exits(last):
        effect = net + dis.stack_effect(
            last.opcode, last.arg if last.opcode >= dis.HAVE_ARGUMENT else None, jump=jump
        )
        pushed = popped + effect
        if last.opname == "LOAD_GLOBAL" and (last.arg or 0) & 1:
            new = (NULL,) + (VALUE,) * (pushed - 1)
        else:
            new = (VALUE,) * pushed
        out.append((jump, nxt, kept + new))
    return out


def handler_layouts(
    code, last: int, layout: tuple[str, ...]
) -> list[tuple[ExceptClause, tuple[str, ...]]]:
    """(clause, stack layout at its body) for each except clause of ``code`` that instruction
    ``last`` (an original index) may raise into. The try region's slots are the bottom of the
    break's stack, the same values (an enclosing loop's iterator stays an iterator); above them the
    saved offset (``lasti`` entries) and the exception handled before are plain values."""
    out = []
    for clause in clauses_reached(code, last):
        if clause.depth <= len(layout):
            out.append((clause, layout[: clause.depth] + (VALUE,) * (int(clause.lasti) + 1)))
    return out


__all__ = [
    "ITER",
    "NULL",
    "VALUE",
    "BreakPoint",
    "GraphBreak",
    "break_point",
    "graph_break",
    "handler_layouts",
    "successor_layouts",
]
