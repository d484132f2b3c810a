"""Code objects for graph breaks, built with the ``bytecode`` library.

Both kinds are a copy of the ORIGINAL function's code with a short prologue after RESUME that
pushes the live stack back from arguments and jumps into the middle:

- ``resume_at_N`` continues the frame at instruction N. It is itself captured, like any function.
- the *step* runs the instruction capture could not handle (a group: 3.11's KW_NAMES/PRECALL/CALL
  is one step) in CPython and hands each successor to its resume function: falling through and
  jumping both go to a tail block that moves the stack and the live locals into a call. So does an
  except clause of the frame the instruction raises into, at the start of its body (see "except
  clauses" below).

Copying the whole code (not just the rest) keeps loops (a back edge above N), ``with`` blocks and
``try`` handlers intact: the exception table still covers the copied instructions, at the same
stack depth, because the prologue rebuilds the stack exactly. Control flow (the exception table,
the ways an instruction continues) is ``flow.py``'s; version differences are ``decode.py``'s
``version_table`` (PRECALL before CALL, comprehension frames, the forward spelling of jumps).
"""

from __future__ import annotations

import dis
import functools
import types
from dataclasses import dataclass

from bytecode import Bytecode, CellVar, FreeVar, Instr, Label, TryBegin, TryEnd

from .decode import decode, version_table
from .flow import ExceptionEntry, flow_graph
from .flow import exits as normal_exits

#: stack slot kinds: a value passed as an argument, the NULL under a callable, or an iterator
#: passed as the tuple of what it has left (so it can be guarded and rebuilt with GET_ITER)
VALUE, NULL, ITER = "value", "null", "iter"

_VT = version_table()
_FORWARD = dict(_VT.forward_jumps)  # a step's tail is after everything: its jumps go forward
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


#: 3.11 comprehensions are functions called with one argument ``.0``, the iterator the caller made
#: (3.12 inlines them, PEP 709); ``<genexpr>`` is a generator and is not one of them
_COMPREHENSION_NAMES = ("<listcomp>", "<dictcomp>", "<setcomp>")
_ITEMS_ARG = "__tk_items"


def is_comprehension(code: types.CodeType) -> bool:
    """Whether ``code`` is a comprehension run as its own frame (3.11 only), which
    ``comprehension_over_tuple`` can transform."""
    return (_VT.comprehension_frames and code.co_name in _COMPREHENSION_NAMES and code.co_argcount == 1
            and code.co_varnames[:1] == (".0",) and not code.co_flags & (_FLAG_VARARGS | _FLAG_VARKEYWORDS))


def comprehension_over_tuple(code: types.CodeType) -> types.CodeType:
    """A 3.11 comprehension's ``code`` taking ``(*cells, items)``: its cells as leading arguments
    (``closure_as_arguments``) and, instead of the iterator ``.0``, the tuple of the items that
    iterator had left. Capture cannot see into an iterator but guards a tuple (length and items).

    A prologue after RESUME does ``.0 = iter(items)``; it shifts the instructions by its length, so
    the result is registered in RESUME_INFO: ``original`` maps a break inside the comprehension to
    the (cells-as-arguments) comprehension code, which its continuations copy, as for any function.
    """
    if not is_comprehension(code):
        raise ValueError(f"{code.co_qualname} is not a 3.11 comprehension")
    base = closure_as_arguments(code) if code.co_freevars else code
    bc = Bytecode.from_code(base)
    resume_pos = next(p for p, item in enumerate(bc) if isinstance(item, Instr) and item.name == "RESUME")
    prologue = _locate([Instr("LOAD_FAST", _ITEMS_ARG), Instr("GET_ITER"), Instr("STORE_FAST", ".0")],
                       code.co_firstlineno)
    bc[resume_pos + 1:resume_pos + 1] = prologue
    bc.argnames = [_ITEMS_ARG if name == ".0" else name for name in bc.argnames]
    n_before = sum(1 for item in bc[:resume_pos + 1] if isinstance(item, Instr))
    new = bc.to_code(stacksize=code.co_stacksize + 1)
    RESUME_INFO[new] = ResumeInfo(base, n_before + len(prologue), len(prologue))
    CELL_ARGS[new] = tuple(code.co_freevars)
    return new


def original(code: types.CodeType, index: int) -> tuple[types.CodeType, int | None]:
    """Map instruction ``index`` of ``code`` (maybe a continuation) to the original code's index."""
    info = RESUME_INFO.get(code)
    if info is None:
        return code, index
    return info.orig, info.orig_index(index)


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
    # live locals first: they are in the original's variable order, so when the first argument
    # (``self``) is live it stays local 0, where 3.11's zero-argument super() looks for it
    args = list(live) + stack_args(layout)
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


def resume_code(code: types.CodeType, index: int, layout: tuple[str, ...], live: tuple[str, ...], name: str) -> types.CodeType:
    """``resume_at_<index>``: continue ``code`` at instruction ``index`` with this stack and these locals."""
    bc, instrs, start, plen = _copy(code, index, layout, live, name)
    _keep_handling(instrs, code, index)
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
    handler: int | None = None  # the body of an except clause the instruction may raise into


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
        if succ.handler is not None:
            body = instrs[succ.handler]
            line = body.lineno or code.co_firstlineno
            tail = _handler_tail(succ, cellvars)
            _locate([x for x in tail if isinstance(x, Instr)], line)
            tails.extend(tail)
            bc.insert(_position(bc, body), Instr("JUMP_FORWARD", label, lineno=line))
            continue
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
    """Move the stack into temporaries, then ``return resume(*live, *stack)`` (cells as cells)."""
    depth = len(succ.layout)
    out = [Instr("STORE_FAST", f"__tk_tmp{i}") for i in reversed(range(depth))]
    out += [Instr("PUSH_NULL"), Instr("LOAD_CONST", succ.resume)]
    argc = 0
    for name in succ.live:
        out.append(Instr("LOAD_CLOSURE", CellVar(name)) if name in cellvars else Instr("LOAD_FAST", name))
        argc += 1
    for i, kind in enumerate(succ.layout):
        if kind == NULL:
            continue  # STORE_FAST of a NULL just leaves the temporary unbound
        if kind == ITER:
            out += [Instr("PUSH_NULL"), Instr("LOAD_CONST", tuple), Instr("LOAD_FAST", f"__tk_tmp{i}"), *_call(1)]
        else:
            out.append(Instr("LOAD_FAST", f"__tk_tmp{i}"))
        argc += 1
    out += [*_call(argc), Instr("RETURN_VALUE")]
    return out


# --- except clauses: a break whose instruction raises into a handler of its own frame -----------------
#
# When the step's instruction raises and a handler of the frame catches it, the step (a copy of the
# original code) runs the handler's matching part in CPython: PUSH_EXC_INFO (which makes the
# exception the one being handled and pushes the one handled before), the CHECK_EXC_MATCH tests,
# then the POP_TOP or ``as e`` store of the exception. There, at the clause's *body*, a tail hands
# the stack and the live locals to ``resume_at_<body>``, so the handler body and everything after
# the try statement are captured again.
#
# The clause's normal exit, POP_EXCEPT (restore the exception handled before), is a thread-state
# effect capture cannot model, and a break there would cut the graph. So continuations that start
# inside a clause body run POP_TOP there instead. Nothing captured can see which exception is being
# handled, only Python can: the continuation restores it (``set_handled``) before handing a later
# break to its step (``handled_slot``), and the catching step's tail restores it when the
# continuation returns or raises.

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
    return dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None, jump=jump)


def _walk_handler(insts, entry: ExceptionEntry) -> tuple[list[ExceptClause], list[int]]:
    """The clauses of the handler of ``entry`` (none unless it starts with PUSH_EXC_INFO: a cleanup
    only restores and re-raises) and the instructions of its normal flow that raise again (no
    clause matched, a cleanup, a ``with`` whose ``__exit__`` did not suppress)."""
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
        for jump, nxt in normal_exits(inst):
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
        clauses, raises = _walk_handler(graph.insts, entry)
        out += [c for c in clauses if c not in out]
        todo += [graph.covering(i) for i in raises]
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def _clause_regions(code: types.CodeType) -> tuple[tuple[ExceptClause, frozenset, frozenset], ...]:
    """Each clause with its body (what runs while it handles: from ``body`` to its exits, nested
    handlers included) and its exits (the POP_EXCEPTs that leave it normally)."""
    graph = flow_graph(code)
    insts = graph.insts
    out = []
    for entry in graph.entries:
        for clause in _walk_handler(insts, entry)[0]:
            body: set[int] = set()
            exits: set[int] = set()
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
                        exits.add(i)
                        continue
                    level -= 1
                todo += [(nxt, level) for _, nxt in normal_exits(inst)]
                inner = graph.covering(i)
                if inner is not None and insts[inner.handler].opname == "PUSH_EXC_INFO":  # not a cleanup
                    todo.append((inner.handler, level + 1))
            out.append((clause, frozenset(body), frozenset(exits)))
    return tuple(out)


def _keep_handling(instrs, code: types.CodeType, index: int) -> None:
    """A continuation starting inside clause bodies pops the exception handled before at their
    exits instead of restoring it (see above): ``handled_slot`` and the catching step restore it."""
    for _, body, exits in _clause_regions(code):
        if index in body:
            for i in exits:
                instrs[i].set("POP_TOP")


def resume_target(code: types.CodeType) -> int | None:
    """The original instruction a ``resume_at_N`` continuation starts at (None: not one)."""
    info = RESUME_INFO.get(code)
    if info is None or info.start == 0:
        return None
    jump = decode(code)[info.start - 1]  # the prologue ends with its jump to N
    if jump.opname != "JUMP_FORWARD" or jump.target is None:
        return None
    return info.orig_index(jump.target)


def handled_slot(code: types.CodeType, start: int, index: int) -> int | None:
    """For a continuation of ``code`` that started at ``start`` and breaks at ``index``: the stack
    slot (of its layout at ``start``) holding the exception that is being handled again at
    ``index``, because clauses it started inside have been left (None: none was left)."""
    left = [clause for clause, body, _ in _clause_regions(code) if start in body and index not in body]
    if not left:
        return None
    outer = min(left, key=lambda c: c.depth)
    return outer.depth + int(outer.lasti)


def _set_handled_code() -> types.CodeType:
    """``set_handled(exc)``: make ``exc`` (or None) the exception being handled, as POP_EXCEPT does
    (the state is the thread's, not the frame's, so it outlives the call)."""
    bc = Bytecode([Instr("RESUME", 0), Instr("LOAD_FAST", "exc"), Instr("POP_EXCEPT"), Instr("LOAD_CONST", None),
                   Instr("RETURN_VALUE")])
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
    return [*out[:stores], begin, *out[stores:call_end], TryEnd(begin), *restore, Instr("RETURN_VALUE"),
            cleanup, *restore, Instr("RERAISE", 0)]
