"""Code objects for graph breaks, built with the ``bytecode`` library.

Both kinds are a copy of the ORIGINAL function's code with a short prologue after RESUME that
pushes the live stack back from arguments and jumps into the middle:

- ``resume_at_N`` continues the frame at instruction N. It is itself captured, like any function.
- the *step* runs the instruction capture could not handle (a group: 3.11's KW_NAMES/PRECALL/CALL
  is one step) in CPython and hands each successor to its resume function: falling through and
  jumping both go to a tail block that moves the stack and the live locals into a call.

Copying the whole code (not just the rest) keeps loops (a back edge above N), ``with`` blocks and
``try`` handlers intact: the exception table still covers the copied instructions, at the same
stack depth, because the prologue rebuilds the stack exactly. Every version difference is in
``_CALL`` and ``_FORWARD``.
"""

from __future__ import annotations

import dis
import sys
import types
from dataclasses import dataclass

from bytecode import Bytecode, CellVar, FreeVar, Instr, Label, TryBegin

from .decode import decode

#: stack slot kinds: a value passed as an argument, the NULL under a callable, or an iterator
#: passed as the tuple of what it has left (so it can be guarded and rebuilt with GET_ITER)
VALUE, NULL, ITER = "value", "null", "iter"

_PY311 = sys.version_info[:2] == (3, 11)
_FORWARD = {  # 3.11 spells the direction of a conditional jump in its name
    "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_FORWARD_IF_TRUE",
    "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_FORWARD_IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_FORWARD_IF_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_FORWARD_IF_NOT_NONE",
    "JUMP_BACKWARD": "JUMP_FORWARD",
    "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_FORWARD",
}
_FLAG_VARARGS, _FLAG_VARKEYWORDS = 0x04, 0x08


@dataclass(frozen=True)
class ResumeInfo:
    """Where a generated code object came from: instruction i of it is ``orig`` instruction i - shift
    for i >= start (the prologue's own instructions, between ``start - prologue`` and ``start``, map
    to nothing)."""

    orig: types.CodeType
    start: int
    shift: int

    def orig_index(self, index: int) -> int | None:
        if index >= self.start:
            return index - self.shift
        if index < self.start - self.shift:
            return index
        return None


#: generated code object -> where it came from (code objects are hashable and immortal enough:
#: each is held by the function that runs it, and the table is keyed by identity-equal objects)
RESUME_INFO: dict[types.CodeType, ResumeInfo] = {}


#: code made by ``closure_as_arguments`` -> the names of its leading cell arguments
CELL_ARGS: dict[types.CodeType, tuple[str, ...]] = {}


def closure_as_arguments(code: types.CodeType) -> types.CodeType:
    """``code`` taking its free variables as leading positional-only arguments: the cells
    themselves. A function made at run time (a closure) then runs as one function per code object,
    called as ``fn(*closure, *args)``: its cells differ per call, its code does not."""
    free = tuple(code.co_freevars)
    bc = Bytecode.from_code(code)
    for item in bc:
        if isinstance(item, Instr):
            if item.name == "COPY_FREE_VARS":
                item.set("NOP")  # the cells are arguments now; NOP keeps instruction indices
            elif isinstance(item.arg, FreeVar):
                item.arg = CellVar(item.arg.name)
    bc.freevars = []
    bc.cellvars = [*free, *bc.cellvars]
    bc.argnames = [*free, *bc.argnames]
    bc.argcount += len(free)
    bc.posonlyargcount += len(free)
    new = bc.to_code(stacksize=code.co_stacksize)
    CELL_ARGS[new] = free
    return new


def original(code: types.CodeType, index: int) -> tuple[types.CodeType, int | None]:
    """Map instruction ``index`` of ``code`` (maybe a continuation) to the original code's index."""
    info = RESUME_INFO.get(code)
    if info is None:
        return code, index
    return info.orig, info.orig_index(index)


def _call(argc: int) -> list[Instr]:
    return ([Instr("PRECALL", argc)] if _PY311 else []) + [Instr("CALL", argc)]


def stack_args(layout: tuple[str, ...]) -> list[str]:
    """Argument names of the stack slots that are passed (NULLs are recreated, not passed)."""
    return [f"__tk_stack{i}" for i, kind in enumerate(layout) if kind != NULL]


def _copy(code: types.CodeType, index: int, layout, live, name: str):
    """(bytecode copy with the prologue, its original instructions in order, instructions up to and
    including RESUME, prologue length)."""
    bc = Bytecode.from_code(code)
    instrs = [item for item in bc if isinstance(item, Instr)]
    if not 0 <= index < len(instrs):
        raise ValueError(f"no instruction {index} in {code.co_name}")
    _set_handler_depths(bc, instrs, code)
    label = Label()
    bc.insert(_position(bc, instrs[index]), label)
    resume_pos = next(p for p, item in enumerate(bc) if isinstance(item, Instr) and item.name == "RESUME")
    line = instrs[index].lineno or code.co_firstlineno
    prologue: list = []
    for i, kind in enumerate(layout):
        if kind == NULL:
            prologue.append(Instr("PUSH_NULL"))
        else:
            prologue.append(Instr("LOAD_FAST", f"__tk_stack{i}"))
            if kind == ITER:
                prologue.append(Instr("GET_ITER"))
    prologue.append(Instr("JUMP_FORWARD", label))
    _locate(prologue, line)
    bc[resume_pos + 1:resume_pos + 1] = prologue
    # cell variables are passed as the cells themselves (closures made before the break share
    # them): their MAKE_CELL becomes a NOP (not removed: instruction indices must not move), so the
    # argument slot holds the caller's cell
    passed = set(live) & set(code.co_cellvars)
    for item in bc[:resume_pos]:
        if isinstance(item, Instr) and item.name == "MAKE_CELL" and item.arg.name in passed:
            item.set("NOP")
    args = stack_args(layout) + list(live)
    bc.argnames = args
    bc.argcount = len(args)
    bc.posonlyargcount = 0
    bc.kwonlyargcount = 0
    bc.flags = bc.flags & ~(_FLAG_VARARGS | _FLAG_VARKEYWORDS)
    bc.name = name
    bc.qualname = f"{code.co_qualname}.{name}"
    n_before = sum(1 for item in bc[:resume_pos + 1] if isinstance(item, Instr))
    return bc, instrs, n_before, len(prologue)


def _assemble(bc, code, layout, live, extra: int = 0) -> types.CodeType:
    """The code object. Exception-table depths are the original's (carried by each TryBegin): the
    flow analysis of ``bytecode`` cannot see regions the prologue jumps over. The stack size covers
    the original's plus what the prologue and the tails add."""
    stacksize = code.co_stacksize + len(layout) + len(live) + extra + 4
    return bc.to_code(stacksize=stacksize, compute_exception_stack_depths=False)


def _locate(instrs: list, line: int) -> list:
    """Give generated instructions the user's line: a traceback through a continuation then
    points at the line that broke (3.12 reports None for instructions without one)."""
    for i in instrs:
        i.lineno = line
    return instrs


def _set_handler_depths(bc, instrs, code) -> None:
    """Give each TryBegin the stack depth of the original exception-table entry for its handler."""
    by_offset = {i.offset: i.index for i in decode(code)}
    depth = {}
    for entry in dis.Bytecode(code).exception_entries:
        if entry.target in by_offset:
            depth[by_offset[entry.target]] = entry.depth
    index_of = {id(instr): n for n, instr in enumerate(instrs)}
    label_pos = {id(item): p for p, item in enumerate(bc) if isinstance(item, Label)}
    for item in bc:
        if isinstance(item, TryBegin):
            pos = label_pos[id(item.target)]
            handler = next(x for x in bc[pos:] if isinstance(x, Instr))
            item.stack_depth = depth[index_of[id(handler)]]


def _position(bc, instr) -> int:
    return next(p for p, item in enumerate(bc) if item is instr)


def resume_code(code: types.CodeType, index: int, layout: tuple[str, ...], live: tuple[str, ...], name: str) -> types.CodeType:
    """``resume_at_<index>``: continue ``code`` at instruction ``index`` with this stack and these locals."""
    bc, _, start, plen = _copy(code, index, layout, live, name)
    new = _assemble(bc, code, layout, live)
    RESUME_INFO[new] = ResumeInfo(code, start + plen, plen)
    return new


@dataclass(frozen=True)
class Successor:
    """Where the step's instruction may continue: ``resume`` is called with the stack and ``live``."""

    jump: bool  # True: the instruction's jump target; False: falling through
    resume: object
    layout: tuple[str, ...]
    live: tuple[str, ...]


def step_code(code: types.CodeType, first: int, last: int, layout: tuple[str, ...], live: tuple[str, ...],
              successors: list[Successor], name: str) -> types.CodeType:
    """Run instructions ``first..last`` of ``code`` in CPython, then call the right continuation."""
    bc, instrs, _, _ = _copy(code, first, layout, live, name)
    cellvars = set(code.co_cellvars)
    inst = instrs[last]
    tails: list = []
    for succ in successors:
        label = Label()
        tails.append(label)
        tails.extend(_locate(_tail(succ, cellvars), inst.lineno or code.co_firstlineno))
        pos = _position(bc, inst)
        if succ.jump:
            new = Instr(_FORWARD.get(inst.name, inst.name), label, location=inst.location)
            bc[pos] = new
            inst = new
        else:
            bc.insert(pos + 1, Instr("JUMP_FORWARD", label, lineno=inst.lineno or code.co_firstlineno))
    bc.extend(tails)
    return _assemble(bc, code, layout, live, extra=max((len(s.layout) + len(s.live) for s in successors), default=0))


def _tail(succ: Successor, cellvars: set) -> list[Instr]:
    """Move the stack into temporaries, then ``return resume(*stack, *live)`` (cells as cells)."""
    depth = len(succ.layout)
    out = [Instr("STORE_FAST", f"__tk_tmp{i}") for i in reversed(range(depth))]
    out += [Instr("PUSH_NULL"), Instr("LOAD_CONST", succ.resume)]
    argc = 0
    for i, kind in enumerate(succ.layout):
        if kind == NULL:
            continue  # STORE_FAST of a NULL just leaves the temporary unbound
        if kind == ITER:
            out += [Instr("PUSH_NULL"), Instr("LOAD_CONST", tuple), Instr("LOAD_FAST", f"__tk_tmp{i}"), *_call(1)]
        else:
            out.append(Instr("LOAD_FAST", f"__tk_tmp{i}"))
        argc += 1
    for name in succ.live:
        out.append(Instr("LOAD_CLOSURE", CellVar(name)) if name in cellvars else Instr("LOAD_FAST", name))
        argc += 1
    out += [*_call(argc), Instr("RETURN_VALUE")]
    return out
