"""Functions made at run time, as code capture can run once per code object.

A closure's cells differ per call of its enclosing frame, its code does not: ``closure_as_arguments``
turns the free variables into leading arguments (the cells themselves), so one captured function
serves every closure of that code. A 3.11 list/dict/set comprehension runs as its own frame over an
iterator capture cannot see into (3.12 inlines it, PEP 709: ``version_table().comprehension_frames``):
``comprehension_over_tuple`` makes it take the items that iterator had left, which capture guards.

Both record what they made in the capture context's ``CodeRegistry`` (``registry.py``).
"""

from __future__ import annotations

import inspect
import types

from bytecode import Bytecode, CellVar, FreeVar, Instr

from .decode import version_table
from .registry import CodeRegistry, ResumeInfo
from .resume import locate

#: the comprehensions that run as functions called with one argument ``.0``, the iterator the
#: caller made; ``<genexpr>`` is a generator and is not one of them
_COMPREHENSION_NAMES = ("<listcomp>", "<dictcomp>", "<setcomp>")
_ITEMS_ARG = "__tk_items"


def closure_as_arguments(
    code: types.CodeType, registry: CodeRegistry | None = None
) -> types.CodeType:
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
    if registry is not None:
        registry.add_cell_args(new, free)
    return new


def is_comprehension(code: types.CodeType) -> bool:
    """Whether ``code`` is a comprehension run as its own frame (3.11 only), which
    ``comprehension_over_tuple`` can transform."""
    return (
        version_table().comprehension_frames
        and code.co_name in _COMPREHENSION_NAMES
        and code.co_argcount == 1
        and code.co_varnames[:1] == (".0",)
        and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    )


def comprehension_over_tuple(
    code: types.CodeType, registry: CodeRegistry | None = None
) -> types.CodeType:
    """A 3.11 comprehension's ``code`` taking ``(*cells, items)``: its cells as leading arguments
    (``closure_as_arguments``) and, instead of the iterator ``.0``, the tuple of the items that
    iterator had left. Capture cannot see into an iterator but guards a tuple (length and items).

    A prologue after RESUME does ``.0 = iter(items)``; it shifts the instructions by its length, so
    the result is recorded in ``registry`` as a shifted copy: a break inside the comprehension maps
    to the (cells-as-arguments) comprehension code, which its continuations copy, as for any function.
    """
    if not is_comprehension(code):
        raise ValueError(f"{code.co_qualname} is not a 3.11 comprehension")
    base = closure_as_arguments(code, registry) if code.co_freevars else code
    bc = Bytecode.from_code(base)
    resume_pos = next(
        p for p, item in enumerate(bc) if isinstance(item, Instr) and item.name == "RESUME"
    )
    prologue = locate(
        [Instr("LOAD_FAST", _ITEMS_ARG), Instr("GET_ITER"), Instr("STORE_FAST", ".0")],
        code.co_firstlineno,
    )
    bc[resume_pos + 1 : resume_pos + 1] = prologue
    bc.argnames = [_ITEMS_ARG if name == ".0" else name for name in bc.argnames]
    n_before = sum(1 for item in bc[: resume_pos + 1] if isinstance(item, Instr))
    new = bc.to_code(stacksize=code.co_stacksize + 1)
    if registry is not None:
        registry.add_shifted(new, ResumeInfo(base, n_before + len(prologue), len(prologue)))
        registry.add_cell_args(new, tuple(code.co_freevars))
    return new


__all__ = ["closure_as_arguments", "comprehension_over_tuple", "is_comprehension"]
