"""Where a value came from, printable as a Python expression over the frame's arguments.

The expression is evaluated inside the generated guard and run functions, whose parameters are the
user function's parameters plus ``_G`` (its globals) and ``_cells`` (its closure cells by name).
"""

from __future__ import annotations

from dataclasses import dataclass


class Source:
    def expr(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.expr()


@dataclass(frozen=True)
class LocalSource(Source):
    name: str

    def expr(self) -> str:
        return self.name


@dataclass(frozen=True)
class GlobalSource(Source):
    name: str

    def expr(self) -> str:
        return f"_G[{self.name!r}]"


@dataclass(frozen=True)
class ClosureSource(Source):
    name: str

    def expr(self) -> str:
        return f"_cells[{self.name!r}].cell_contents"


@dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def expr(self) -> str:
        if self.attr.isidentifier() and not self.attr.startswith("__"):
            return f"{self.base.expr()}.{self.attr}"
        return f"getattr({self.base.expr()}, {self.attr!r})"


@dataclass(frozen=True)
class ItemSource(Source):
    base: Source
    key: object

    def expr(self) -> str:
        return f"{self.base.expr()}[{self.key!r}]"


@dataclass(frozen=True)
class ClosureCellSource(Source):
    """The contents of cell ``index`` of a function reached through ``base``."""

    base: Source
    index: int

    def expr(self) -> str:
        return f"{self.base.expr()}.__closure__[{self.index}].cell_contents"


@dataclass(frozen=True)
class DefaultSource(Source):
    base: Source
    index: int

    def expr(self) -> str:
        return f"{self.base.expr()}.__defaults__[{self.index}]"


@dataclass(frozen=True)
class NamedRefSource(Source):
    """An object the generated code holds by name (e.g. another module's globals dict)."""

    ref: str

    def expr(self) -> str:
        return self.ref
