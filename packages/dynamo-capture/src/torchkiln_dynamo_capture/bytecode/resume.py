"""Continuations and steps: the code objects of a graph break, built with the ``bytecode`` library.

Both kinds are a copy of the ORIGINAL function's code with a short prologue after RESUME that
pushes the live stack back from arguments and jumps into the middle:

- ``resume_at_N`` continues the frame at instruction N. It is itself captured, like any function.
- the *step* runs the instruction capture could not handle (a group: 3.11's KW_NAMES/PRECALL/CALL
  is one step) in CPython and hands each successor to its resume function: falling through and
  jumping both go to a tail block that moves the stack and the live locals into a call. So does an
  except clause of the frame the instruction raises into, at the start of its body (the analysis is
  ``except_flow.py``'s; ``_handler_tail`` and ``set_handled`` are its code).

Copying the whole code (not just the rest) keeps loops (a back edge above N), ``with`` blocks and
``try`` handlers intact: the exception table still covers the copied instructions, at the same
stack depth, because the prologue rebuilds the stack exactly. Control flow (the exception table,
the ways an instruction continues) is ``flow.py``'s; version differences are ``decode.py``'s
``version_table`` (PRECALL before CALL, the forward spelling of jumps). Where each generated code
object came from is recorded in the capture context's ``CodeRegistry`` (``registry.py``).
"""

from __future__ import annotations

import inspect
import keyword
import types
import weakref
from dataclasses import dataclass

from bytecode import Bytecode, CellVar, Instr, Label, TryBegin, TryEnd

from .decode import version_table
from .except_flow import clause_exits
from .flow import flow_graph
from .registry import CodeRegistry, ResumeInfo

#: stack slot kinds: a value passed as an argument, the NULL under a callable, or an iterator
#: passed as the tuple of what it has left (so it can be guarded and rebuilt with GET_ITER)
VALUE, NULL, ITER = "value", "null", "iter"

_VT = version_table()
_FORWARD = dict(_VT.forward_jumps)  # a step's tail is after everything: its jumps go forward


#: instructions whose argument names a local variable (not a cell): bytecode's abstract forms
_LOCAL_OPS = frozenset(
    {"LOAD_FAST", "STORE_FAST", "DELETE_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR"}
)


def parameter_name(name: str) -> str:
    """The name a local of the original frame has in a continuation or step, whose live locals
    are parameters: itself, unless Python refuses it as a parameter's (pytest's rewritten
    asserts keep ``@py_assert2`` among a test's locals; a break while one was live failed the
    continuation's capture, ``inspect.Signature`` raising "not a valid parameter name"); then
    ``__tk_local_`` and the name with each other character spelled as its code point."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    spelled = "".join(c if c.isalnum() or c == "_" else f"_{ord(c):x}_" for c in name)
    return f"__tk_local_{spelled}"


def _call(argc: int) -> list[Instr]:
    return ([Instr("PRECALL", argc)] if _VT.precall else []) + [Instr("CALL", argc)]


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
    resume_pos = next(
        p for p, item in enumerate(bc) if isinstance(item, Instr) and item.name == "RESUME"
    )
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
    locate(prologue, line)
    bc[resume_pos + 1 : resume_pos + 1] = prologue
    # cell variables are passed as the cells themselves (closures made before the break share
    # them): their MAKE_CELL becomes a NOP (not removed: instruction indices must not move), so the
    # argument slot holds the caller's cell
    passed = set(live) & set(code.co_cellvars)
    for item in bc[:resume_pos]:
        if isinstance(item, Instr) and item.name == "MAKE_CELL" and item.arg.name in passed:
            item.set("NOP")
    # a local Python refuses as a parameter's name is renamed throughout the copy (cells keep
    # theirs: MAKE_CELL and the closures made before the break name them)
    cells = set(code.co_cellvars) | set(code.co_freevars)
    for item in bc:
        if isinstance(item, Instr) and item.name in _LOCAL_OPS and item.arg not in cells:
            item.arg = parameter_name(item.arg)
    # live locals first: they are in the original's variable order, so when the first argument
    # (``self``) is live it stays local 0, where 3.11's zero-argument super() looks for it
    args = [n if n in cells else parameter_name(n) for n in live] + stack_args(layout)
    bc.argnames = args
    bc.argcount = len(args)
    bc.posonlyargcount = 0
    bc.kwonlyargcount = 0
    bc.flags = bc.flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    bc.name = name
    bc.qualname = f"{code.co_qualname}.{name}"
    n_before = sum(1 for item in bc[: resume_pos + 1] if isinstance(item, Instr))
    return bc, instrs, n_before, len(prologue)


def _assemble(bc, code, layout, live, extra: int = 0) -> types.CodeType:
    """The code object. Exception-table depths are the original's (carried by each TryBegin): the
    flow analysis of ``bytecode`` cannot see regions the prologue jumps over. The stack size covers
    the original's plus what the prologue and the tails add."""
    stacksize = code.co_stacksize + len(layout) + len(live) + extra + 4
    return bc.to_code(stacksize=stacksize, compute_exception_stack_depths=False)


def locate(instrs: list, line: int) -> list:
    """Give generated instructions the user's line: a traceback through a continuation then
    points at the line that broke (3.12 reports None for instructions without one)."""
    for i in instrs:
        i.lineno = line
    return instrs


def _set_handler_depths(bc, instrs, code) -> None:
    """Give each TryBegin the stack depth of the original exception-table entry for its handler."""
    depth = flow_graph(code).handler_depth
    index_of = {id(instr): n for n, instr in enumerate(instrs)}
    label_pos = {id(item): p for p, item in enumerate(bc) if isinstance(item, Label)}
    for item in bc:
        if isinstance(item, TryBegin):
            pos = label_pos[id(item.target)]
            handler = next(x for x in bc[pos:] if isinstance(x, Instr))
            item.stack_depth = depth[index_of[id(handler)]]


def _position(bc, instr) -> int:
    return next(p for p, item in enumerate(bc) if item is instr)


def resume_code(
    code: types.CodeType,
    index: int,
    layout: tuple[str, ...],
    live: tuple[str, ...],
    name: str,
    registry: CodeRegistry | None = None,
) -> types.CodeType:
    """``resume_at_<index>``: continue ``code`` at instruction ``index`` with this stack and these
    locals (recorded in ``registry``, so a break inside it maps back to ``code``)."""
    bc, instrs, start, plen = _copy(code, index, layout, live, name)
    for i in clause_exits(code, index):
        instrs[i].set("POP_TOP")  # see except_flow.py: the catching step restores the exception
    new = _assemble(bc, code, layout, live)
    if registry is not None:
        registry.add_shifted(new, ResumeInfo(code, start + plen, plen))
    return new


@dataclass(frozen=True)
class Successor:
    """Where the step's instruction may continue: ``resume`` is called with the stack and ``live``."""

    jump: bool  # True: the instruction's jump target; False: falling through
    resume: object
    layout: tuple[str, ...]
    live: tuple[str, ...]
    handler: int | None = None  # the body of an except clause the instruction may raise into


def step_code(
    code: types.CodeType,
    first: int,
    last: int,
    layout: tuple[str, ...],
    live: tuple[str, ...],
    successors: list[Successor],
    name: str,
    reader=None,
) -> types.CodeType:
    """Run instructions ``first..last`` of ``code`` in CPython, then call the right continuation.
    ``reader``: the instruction is an attribute read, done as ``reader(obj)`` instead (a property
    whose getter is captured on its own, see ``CaptureContext.property_reader``)."""
    bc, instrs, _, _ = _copy(code, first, layout, live, name)
    cellvars = set(code.co_cellvars)
    inst = instrs[last]
    if reader is not None:
        inst = _read_through(bc, inst, reader)
    tails: list = []
    for succ in successors:
        label = Label()
        tails.append(label)
        if succ.handler is not None:
            body = instrs[succ.handler]
            line = body.lineno or code.co_firstlineno
            tail = _handler_tail(succ, cellvars)
            locate([x for x in tail if isinstance(x, Instr)], line)
            tails.extend(tail)
            bc.insert(_position(bc, body), Instr("JUMP_FORWARD", label, lineno=line))
            continue
        tails.extend(locate(_tail(succ, cellvars), inst.lineno or code.co_firstlineno))
        pos = _position(bc, inst)
        if succ.jump:
            new = Instr(_FORWARD.get(inst.name, inst.name), label, location=inst.location)
            bc[pos] = new
            inst = new
        else:
            bc.insert(
                pos + 1, Instr("JUMP_FORWARD", label, lineno=inst.lineno or code.co_firstlineno)
            )
    bc.extend(tails)
    return _assemble(
        bc,
        code,
        layout,
        live,
        extra=max((len(s.layout) + len(s.live) for s in successors), default=0),
    )


def _read_through(bc, inst: Instr, reader) -> Instr:
    """Replace the attribute read ``inst`` (stack: obj -> value) with ``reader(obj)``; returns the
    last new instruction. The reader is held weakly, as ``_tail`` holds a continuation (it holds
    a captured function, whose context holds this step)."""
    line = inst.lineno
    new = [
        Instr("STORE_FAST", "__tk_read_obj"),
        Instr("PUSH_NULL"),
        Instr("PUSH_NULL"),
        Instr("LOAD_CONST", weakref.ref(reader)),
        *_call(0),
        Instr("LOAD_FAST", "__tk_read_obj"),
        *_call(1),
    ]
    for i in new:
        i.lineno = line
    pos = _position(bc, inst)
    bc[pos : pos + 1] = new
    return new[-1]


def _tail(succ: Successor, cellvars: set) -> list[Instr]:
    """Move the stack into temporaries, then ``return resume(*live, *stack)`` (cells as cells).

    The step holds its continuation by a weak reference (``resume_ref()`` makes the call): a
    code object's constants are invisible to the cycle collector, so a strong one would keep the
    continuation, its capture context and every graph of it alive for good (step -> continuation
    -> context -> step). The context holds the continuation while any step of it can run."""
    depth = len(succ.layout)
    out = [Instr("STORE_FAST", f"__tk_tmp{i}") for i in reversed(range(depth))]
    out += [
        Instr("PUSH_NULL"),
        Instr("PUSH_NULL"),
        Instr("LOAD_CONST", weakref.ref(succ.resume)),
        *_call(0),
    ]
    argc = 0
    for name in succ.live:
        out.append(
            Instr("LOAD_CLOSURE", CellVar(name))
            if name in cellvars
            else Instr("LOAD_FAST", parameter_name(name))
        )
        argc += 1
    for i, kind in enumerate(succ.layout):
        if kind == NULL:
            continue  # STORE_FAST of a NULL just leaves the temporary unbound
        if kind == ITER:
            out += [
                Instr("PUSH_NULL"),
                Instr("LOAD_CONST", tuple),
                Instr("LOAD_FAST", f"__tk_tmp{i}"),
                *_call(1),
            ]
        else:
            out.append(Instr("LOAD_FAST", f"__tk_tmp{i}"))
        argc += 1
    out += [*_call(argc), Instr("RETURN_VALUE")]
    return out


def _set_handled_code() -> types.CodeType:
    """``set_handled(exc)``: make ``exc`` (or None) the exception being handled, as POP_EXCEPT does
    (the state is the thread's, not the frame's, so it outlives the call)."""
    bc = Bytecode(
        [
            Instr("RESUME", 0),
            Instr("LOAD_FAST", "exc"),
            Instr("POP_EXCEPT"),
            Instr("LOAD_CONST", None),
            Instr("RETURN_VALUE"),
        ]
    )
    bc.argnames, bc.argcount, bc.name = ["exc"], 1, "set_handled"
    return bc.to_code()


set_handled = types.FunctionType(_set_handled_code(), {}, "set_handled")


def _handler_tail(succ: Successor, cellvars: set) -> list:
    """At a clause body: ``prev = <exception handled before>; try: r = resume(*live, *stack)
    finally: <restore prev>; return r``."""
    prev = f"__tk_tmp{len(succ.layout) - 1}"
    out = _tail(succ, cellvars)
    call_end = len(out) - 1  # the RETURN_VALUE
    stores = len(succ.layout)
    cleanup = Label()
    begin = TryBegin(cleanup, push_lasti=False, stack_depth=0)
    restore = [Instr("LOAD_FAST", prev), Instr("POP_EXCEPT")]
    return [
        *out[:stores],
        begin,
        *out[stores:call_end],
        TryEnd(begin),
        *restore,
        Instr("RETURN_VALUE"),
        cleanup,
        *restore,
        Instr("RERAISE", 0),
    ]
