"""Where generated code objects came from, for one capture context.

Continuations (``resume_at_N``) and the 3.11 closure transforms are copies of a user's code with
instructions added in front or arguments added: capture must map a break inside one back to the
original's instruction (``original``), find where a continuation started (``resume_target``), and
know which arguments are cells (``passed_cells``).

A ``CodeRegistry`` belongs to one ``CaptureContext`` (wrapper.py), which made every code object
recorded in it, and it is keyed by weak references to those code objects: an entry lives as long
as the code it describes and never longer than its context. A long-running process compiling many
functions therefore holds the entries of the compiled functions still alive, not of every function
it ever compiled (``tests/test_registries.py`` checks it); the previous module-level dicts grew
without limit.
"""

from __future__ import annotations

import types
import weakref
from dataclasses import dataclass

from .decode import decode


@dataclass(frozen=True)
class ResumeInfo:
    """Where a generated code object came from: instruction i of it is ``orig`` instruction i - shift
    for i >= start (the prologue's own instructions, between ``start - shift`` and ``start``, map
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


class CodeRegistry:
    """The code objects one capture context generated: each prologue-shifted copy's ``ResumeInfo``
    and, for code taking its cells as leading arguments, their names."""

    def __init__(self) -> None:
        self._shifted: weakref.WeakKeyDictionary[types.CodeType, ResumeInfo] = (
            weakref.WeakKeyDictionary()
        )
        self._cell_args: weakref.WeakKeyDictionary[types.CodeType, tuple[str, ...]] = (
            weakref.WeakKeyDictionary()
        )
        self._steps: weakref.WeakSet[types.CodeType] = weakref.WeakSet()

    def add_shifted(self, code: types.CodeType, info: ResumeInfo) -> None:
        self._shifted[code] = info

    def add_cell_args(self, code: types.CodeType, names: tuple[str, ...]) -> None:
        self._cell_args[code] = names

    def add_step(self, code: types.CodeType) -> None:
        self._steps.add(code)

    def runs_the_program(self, code: types.CodeType) -> bool:
        """Whether ``code`` is a continuation or a break's step: the captured program's own
        instructions, run as eager runs them (an error raised in it is the program's)."""
        return code in self._shifted or code in self._steps

    def info(self, code: types.CodeType) -> ResumeInfo | None:
        """Where ``code`` came from (None: not a shifted copy this context made)."""
        return self._shifted.get(code)

    def original(self, code: types.CodeType, index: int) -> tuple[types.CodeType, int | None]:
        """Map instruction ``index`` of ``code`` (maybe a continuation) to the original code's index."""
        info = self._shifted.get(code)
        if info is None:
            return code, index
        return info.orig, info.orig_index(index)

    def resume_target(self, code: types.CodeType) -> int | None:
        """The original instruction a ``resume_at_N`` continuation starts at (None: not one)."""
        info = self._shifted.get(code)
        if info is None or info.start == 0:
            return None
        jump = decode(code)[info.start - 1]  # the prologue ends with its jump to N
        if jump.opname != "JUMP_FORWARD" or jump.target is None:
            return None
        return info.orig_index(jump.target)

    def passed_cells(self, code: types.CodeType) -> frozenset[str]:
        """The arguments of ``code`` that are cells, handed over as the cells themselves: every cell
        variable of a continuation, the leading cell arguments of a closure transform."""
        if code in self._shifted:
            return frozenset(code.co_cellvars)
        return frozenset(self._cell_args.get(code, ()))

    def __len__(self) -> int:
        """How many code objects are recorded (each at most once, whatever it carries)."""
        return len(set(map(id, self._shifted.keys())) | set(map(id, self._cell_args.keys())))


__all__ = ["CodeRegistry", "ResumeInfo"]
