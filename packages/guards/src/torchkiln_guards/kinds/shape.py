"""ShapeGuard: a symbolic relation (sympy) over input sizes, for dynamic shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
from sympy.printing.pycode import PythonCodePrinter
from sympy.printing.str import StrPrinter

from ..source import SizeSource, Source, StrideSource
from .base import CodeContext, Guard, GuardFailure, Raised

__all__ = ["ShapeGuard"]


class _PyPrinter(PythonCodePrinter):
    """Python code for an integer relation; symbols print as the code reading their size.
    Integer-division functions of torch's and our loop IR's sympy vocabulary print as // and %."""

    def __init__(self, names: Mapping[sympy.Symbol, str], ctx: CodeContext) -> None:
        super().__init__({"fully_qualified_modules": False})
        self._names = names
        self._ctx = ctx

    def _print_Symbol(self, expr: sympy.Expr) -> str:
        return self._names[expr]

    def _operand(self, expr: sympy.Expr) -> str:
        """An operand of // or %, parenthesised unless atomic: the printer leaves a product bare
        (``2*s0*s1``), and ``a % 2*s0*s1`` in Python is ``(a % 2)*s0*s1``, a guard that fails
        (or passes) for the wrong sizes."""
        text = self._print(expr)
        return text if expr.is_Atom else f"({text})"

    def _print_Function(self, expr: sympy.Expr) -> str:
        name = type(expr).__name__
        if name in ("Max", "Min"):
            args = [self._print(a) for a in expr.args]
        else:
            args = [self._operand(a) for a in expr.args]
        if name in ("FloorDiv", "IntTrueDiv", "CleanDiv") and len(args) == 2:
            return f"({args[0]} // {args[1]})"
        if name == "ModularIndexing" and len(args) == 3:
            return f"(({args[0]} // {args[1]}) % {args[2]})"
        if name in ("PythonMod", "Mod") and len(args) == 2:
            return f"({args[0]} % {args[1]})"
        if name in ("Max", "Min"):
            return f"{self._ctx.builtin(name.lower())}({', '.join(args)})"
        raise TypeError(f"ShapeGuard cannot generate code for sympy function {name}")

    def _print_Max(self, expr: sympy.Expr) -> str:
        return self._print_Function(expr)

    def _print_Min(self, expr: sympy.Expr) -> str:
        return self._print_Function(expr)

    def _print_Mod(self, expr: sympy.Expr) -> str:
        a, b = (self._operand(x) for x in expr.args)
        return f"({a} % {b})"


class _ExprPrinter(StrPrinter):
    """The relation as the user reads it, symbols shown as ``L['x'].size()[0]``."""

    def __init__(self, names: Mapping[sympy.Symbol, str]) -> None:
        super().__init__()
        self._names = names

    def _print_Symbol(self, expr: sympy.Expr) -> str:
        return self._names.get(expr, expr.name)


def _dim_source(source: Source, dim: int, kind: str = "size") -> Source:
    if kind == "value":  # an int input itself (a size handed over a graph break)
        return source
    return StrideSource(source, dim) if kind == "stride" else SizeSource(source, dim)


@dataclass(frozen=True)
class ShapeGuard(Guard):
    """``expr`` (a sympy relational or boolean) holds when each symbol is bound to a size.

    ``symbols`` maps each free symbol to ``(source, dim)``: the symbol is ``source``'s size at
    ``dim``, or to ``(source, dim, "stride")``: its stride there, or to ``(source, -1, "value")``:
    the int at ``source`` itself. It is stored as a tuple of
    ``(symbol, (source, dim, kind))`` pairs, sorted by name.
    """

    expr: sympy.Basic
    symbols: tuple
    cost = 4

    def __init__(self, expr: sympy.Basic, symbols: Mapping[sympy.Symbol, tuple[Source, int]]):
        items = dict(symbols.items() if isinstance(symbols, Mapping) else symbols)
        missing = expr.free_symbols - set(items)
        if missing:
            raise ValueError(
                f"ShapeGuard {expr}: no (source, dim) given for symbols {sorted(map(str, missing))}"
            )
        pairs = tuple(
            sorted(
                ((s, (v[0], int(v[1]), v[2] if len(v) > 2 else "size")) for s, v in items.items()),
                key=lambda p: p[0].name,
            )
        )
        object.__setattr__(self, "expr", expr)
        object.__setattr__(self, "symbols", pairs)

    @property
    def sources(self) -> tuple[Source, ...]:
        return tuple(_dim_source(*entry) for _, entry in self.symbols)

    def expr_text(self) -> str:
        """The relation with sizes spelled as source expressions."""
        names = {s: _dim_source(*entry).expr() for s, entry in self.symbols}
        return _ExprPrinter(names).doprint(self.expr)

    def summary(self) -> str:
        return f"ShapeGuard({self.expr_text()})"

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        names = {s: ref for (s, _), ref in zip(self.symbols, refs)}
        return f"({_PyPrinter(names, ctx).doprint(self.expr)})"

    def failure(self, *sizes: Any) -> GuardFailure | None:
        binding = {s: sympy.Integer(int(v)) for (s, _), v in zip(self.symbols, sizes)}
        detail = ", ".join(
            f"{_dim_source(*entry).expr()}={int(v)}" for (_, entry), v in zip(self.symbols, sizes)
        )
        try:
            result = self.expr.xreplace(binding)
            holds = bool(result)
        except Exception as exc:  # noqa: BLE001 - an unevaluable relation fails the guard
            return self._fail(self.expr_text(), True, Raised(exc), detail)
        return None if holds else self._fail(self.expr_text(), True, False, detail)
