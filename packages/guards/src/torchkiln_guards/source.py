"""Sources: where a guarded value comes from, printable as the expression a user would write.

A source is a small frozen dataclass. Roots are the frame's locals (``L['x']``), its globals
(``G['cfg']``) and its closure cells (``C['n']``); derived sources walk from a base by attribute,
item or tensor size. Each source knows two things: the text a user reads (``expr()``) and the
Python code the generated check uses to fetch it from its base (``_code``), plus a slow-path
``_fetch`` used by ``explain_failure``.
"""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AttrSource",
    "ClosureSource",
    "GlobalSource",
    "ItemSource",
    "LocalSource",
    "SizeSource",
    "Source",
    "StrideSource",
]

# Keys that can be written as a literal inside the generated code (repr round-trips).
_LITERAL_KEY_TYPES = (int, str, bool, type(None))


@dataclass(frozen=True)
class _Frame:
    """What a source is read from on the slow path: bound arguments, globals, closure cells."""

    locals: Mapping[str, Any]
    globals: Mapping[str, Any]
    closure: Mapping[str, Any]


class Source:
    """Where a guarded value comes from. Subclasses are frozen dataclasses (hashable, comparable)."""

    @property
    def base(self) -> Source | None:
        """The source this one is read from, or None for a root (local, global, closure cell)."""
        return None

    def expr(self) -> str:
        """The expression a user would write to reach the value, e.g. ``L['x'].size()[0]``."""
        raise NotImplementedError

    def root(self) -> Source:
        """The local, global or closure source at the start of this chain."""
        src: Source = self
        while src.base is not None:
            src = src.base
        return src

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        """Python code reading this value, given the code of its base (``ctx.const`` binds objects)."""
        raise NotImplementedError

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        """Slow path: the value, given the base's value. Raises whatever the access raises."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.expr()


@dataclass(frozen=True)
class LocalSource(Source):
    """A local variable of the compiled frame (a parameter of the user function): ``L['x']``."""

    name: str

    def expr(self) -> str:
        return f"L[{self.name!r}]"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        return self.name

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return frame.locals[self.name]


@dataclass(frozen=True)
class GlobalSource(Source):
    """A global of the user function's module: ``G['cfg']``."""

    name: str

    def expr(self) -> str:
        return f"G[{self.name!r}]"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        return f"___G[{self.name!r}]"

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return frame.globals[self.name]


@dataclass(frozen=True)
class ClosureSource(Source):
    """The contents of the closure cell of free variable ``name``: ``C['name']``."""

    name: str

    def expr(self) -> str:
        return f"C[{self.name!r}]"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        # The cell object is bound at compile time; only its contents are read per call.
        return f"___cell_{self.name}.cell_contents"

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return frame.closure[self.name].cell_contents


@dataclass(frozen=True)
class AttrSource(Source):
    """An attribute of another source: ``<base>.attr`` (modules: parameters and submodules too)."""

    source: Source
    attr: str

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"{self.source.expr()}.{self.attr}"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        if self.attr.isidentifier() and not keyword.iskeyword(self.attr):
            return f"{base_ref}.{self.attr}"
        return f"{ctx.builtin('getattr')}({base_ref}, {self.attr!r})"

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return getattr(base_value, self.attr)


@dataclass(frozen=True)
class ItemSource(Source):
    """An item of another source: ``<base>[key]`` (list/tuple index, dict key, ModuleList index)."""

    source: Source
    key: Any

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"{self.source.expr()}[{self.key!r}]"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        if type(self.key) in _LITERAL_KEY_TYPES:
            return f"{base_ref}[{self.key!r}]"
        return f"{base_ref}[{ctx.const(self.key, 'key')}]"

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return base_value[self.key]

    def __hash__(self) -> int:
        # a slice key (``t[1:]``) is unhashable before Python 3.12
        key = (
            (self.key.start, self.key.stop, self.key.step)
            if isinstance(self.key, slice)
            else self.key
        )
        return hash((self.source, type(self.key), key))


@dataclass(frozen=True)
class SizeSource(Source):
    """The size of a tensor source at one dimension: ``L['x'].size()[0]``."""

    source: Source
    dim: int

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"{self.source.expr()}.size()[{self.dim}]"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        return f"{base_ref}.shape[{self.dim}]"

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return base_value.shape[self.dim]


@dataclass(frozen=True)
class StrideSource(Source):
    """The stride of a tensor source at one dimension: ``L['x'].stride()[0]`` (a dynamic input
    sliced with a step has a stride no size shows, and its own symbol)."""

    source: Source
    dim: int

    @property
    def base(self) -> Source:
        return self.source

    def expr(self) -> str:
        return f"{self.source.expr()}.stride()[{self.dim}]"

    def _code(self, base_ref: str | None, ctx: Any) -> str:
        return f"{base_ref}.stride({self.dim})"

    def _fetch(self, base_value: Any, frame: _Frame) -> Any:
        return base_value.stride(self.dim)
