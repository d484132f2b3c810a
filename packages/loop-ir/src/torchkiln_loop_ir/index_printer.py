"""Index expressions (sympy) as source text: the semantics every code generator shares.

Index and size expressions are integer sympy expressions (see indexing.py). What each construct
means is decided here, once, and is sympy's (that is, Python's) meaning:

- ``FloorDiv(a, b)`` rounds toward minus infinity, for a numerator of any sign (the divisor is
  positive: a size or a constant). Where the numerator is provably non-negative (loop variables,
  sizes and indirect indices are non-negative symbols: see ``nonnegative``) the target's own
  integer division is printed, which truncates and agrees there; elsewhere a form exact for negatives.
- ``ModularIndexing(a, d, m)`` is ``FloorDiv(a, d) mod m`` and ``Mod(a, m)`` is ``a mod m``, both
  with the sign of the (positive) modulus, as Python's ``%``.
- ``floor(p / q)`` and ``ceiling(p / q)`` (some simplifications leave them) are floor divisions.
- ``Min``/``Max`` fold left over their arguments; relations compare; ``And``/``Or``/``Not`` are
  logical (their operands are relations or booleans); ``Piecewise`` selects its first true branch.
- A rational or float coefficient, a negative or symbolic power, or any other function is refused
  with ``CodegenError``: index arithmetic is integer arithmetic.

Every sub-expression is parenthesized, so no target's operator precedence matters. The printers
differ only in spelling, the hooks below: ``PythonIndexPrinter`` (plain Python ints, for
launchers), and the code generators' C++ and Triton subclasses. Dispatch is by name, as in sympy's
printers: ``_print_<class name>`` along the expression's class hierarchy, looked up once per class
(sympy's ``Printer`` walks the hierarchy at every node, which made printing twice as slow).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import sympy

from .errors import CodegenError
from .indexing import FloorDiv, ModularIndexing

_METHODS: dict[
    tuple[type, type], Callable[[IndexPrinter, Any], str]
] = {}  # a memo, not configuration


@functools.lru_cache(maxsize=4096)
def nonnegative(e: sympy.Expr) -> bool:
    """Whether ``e`` is provably >= 0 (False when unsure). Read from the structure first: loop
    variables, sizes and indirect indices are non-negative symbols, so sums and products of them
    are, and sympy's assumption system (a millisecond per expression) is asked only about what
    that leaves open. ``FloorDiv`` declares itself non-negative (loop-IR's contract gives it
    non-negative numerators); its numerator is checked instead of trusting that."""
    if e.is_Integer:
        return int(e) >= 0
    if e.is_Symbol:
        return bool(e.is_nonnegative)
    if isinstance(e, (sympy.Add, sympy.Mul, sympy.Min)) and all(nonnegative(a) for a in e.args):
        return True
    if isinstance(e, sympy.Max) and any(nonnegative(a) for a in e.args):
        return True
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0 and nonnegative(e.base):
        return True
    if isinstance(e, (ModularIndexing, sympy.Mod)):  # floor modulo a positive modulus
        return True
    if isinstance(e, (FloorDiv, sympy.floor, sympy.ceiling)):
        return nonnegative(e.args[0])
    if e.has(FloorDiv):  # sympy would trust FloorDiv's declared sign
        return False
    return bool(e.is_nonnegative)


class IndexPrinter:
    """The shared printer; subclasses override the spelling hooks (``integer`` ... ``boolean``).

    The defaults spell Python source in which ``//`` and ``%`` truncate toward zero (C's and
    Triton's integer semantics): ``native_floor`` tells whether the target's ``//`` and ``%``
    already floor, as Python's do.
    """

    native_floor = False
    target = "Python"
    error: type[CodegenError] = CodegenError  # a code generator raises its own subclass

    def __call__(self, expr: object) -> str:
        return self.doprint(expr)

    def doprint(self, expr: object) -> str:
        return self._print(sympy.sympify(expr))

    def _print(self, expr: object) -> str:
        cls = type(expr)
        method = _METHODS.get((type(self), cls))
        if method is None:
            method = next(
                (
                    m
                    for c in cls.__mro__
                    if (m := getattr(type(self), f"_print_{c.__name__}", None))
                ),
                type(self).unknown,
            )
            _METHODS[(type(self), cls)] = method
        return method(self, expr)

    # ---- spelling hooks: what truly differs between targets --------------------------------

    def integer(self, value: int) -> str:
        return str(value) if value >= 0 else f"({value})"

    def div(self, a: str, b: str) -> str:
        """The target's integer division (truncating unless ``native_floor``)."""
        return f"({a} // {b})"

    def mod(self, a: str, b: str) -> str:
        """The target's integer remainder (sign of ``a`` unless ``native_floor``)."""
        return f"({a} % {b})"

    def minimum(self, a: str, b: str) -> str:
        return f"min({a}, {b})"

    def maximum(self, a: str, b: str) -> str:
        return f"max({a}, {b})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({a} if {cond} else {b})"

    def logical(self, op: str, operands: list[str]) -> str:
        """``op`` is "and" or "or"."""
        return "(" + f" {op} ".join(operands) + ")"

    def negate(self, a: str) -> str:
        return f"(not {a})"

    def boolean(self, value: bool) -> str:
        return "True" if value else "False"

    # ---- the shared semantics ----------------------------------------------------------------

    def unknown(self, expr: object) -> str:
        raise self.error(
            f"cannot print index expression {expr} ({type(expr).__name__}) for {self.target}"
        )

    def _print_Integer(self, e: sympy.Integer) -> str:
        return self.integer(int(e))

    def _print_Symbol(self, e: sympy.Symbol) -> str:
        return e.name

    def _print_Add(self, e: sympy.Add) -> str:
        return "(" + " + ".join(self._print(a) for a in e.args) + ")"

    def _print_Mul(self, e: sympy.Mul) -> str:
        coeff, rest = e.as_coeff_Mul()
        if coeff == -1:
            return f"(-{self._print(rest)})"
        if not coeff.is_Integer:
            raise self.error(f"non-integer coefficient in index expression {e} ({self.target})")
        return "(" + " * ".join(self._print(a) for a in e.args) + ")"

    def _print_Pow(self, e: sympy.Pow) -> str:
        base, exp = e.args
        if isinstance(exp, sympy.Integer) and int(exp) > 0:
            return "(" + " * ".join([self._print(base)] * int(exp)) + ")"
        raise self.error(f"cannot print power {e} in an index expression ({self.target})")

    def floordiv(self, a: sympy.Expr, b: sympy.Expr) -> str:
        """``a`` divided by the positive ``b``, rounded toward minus infinity."""
        if b.is_zero:
            return self.integer(0)  # see floormod
        if b.is_positive is False:
            raise self.error(f"floor division by {b}, not a positive divisor ({self.target})")
        pa, pb = self._print(a), self._print(b)
        if self.native_floor or nonnegative(a):
            return self.div(pa, pb)
        # a < 0 and b > 0: floor(a / b) == trunc((a - (b - 1)) / b)
        return self.select(
            f"({pa} < {self.integer(0)})", self.div(self._print(a - b + 1), pb), self.div(pa, pb)
        )

    def floormod(self, a: sympy.Expr, m: sympy.Expr, printed_a: str | None = None) -> str:
        """``a`` modulo the positive ``m``, with the sign of ``m`` (Python's ``%``);
        ``printed_a``: ``a`` already printed."""
        if m.is_zero:
            # a size of 0 divides only in an index no point reaches: a view of a dim of size 0
            # (the empty side of a cat, a gather from an empty tensor, masked off); any value
            # serves, and a literal division by zero would not compile
            return self.integer(0)
        if m.is_positive is False:
            raise self.error(f"modulus {m} is not positive ({self.target})")
        pa = self._print(a) if printed_a is None else printed_a
        pm = self._print(m)
        if self.native_floor or nonnegative(a):
            return self.mod(pa, pm)
        # the truncating remainder lies in (-m, m): one more add and remainder lands in [0, m)
        return self.mod(f"({self.mod(pa, pm)} + {pm})", pm)

    def _print_FloorDiv(self, e: FloorDiv) -> str:
        return self.floordiv(*e.args)

    def _print_ModularIndexing(self, e: ModularIndexing) -> str:
        base, div, mod = e.args
        if div == 1:
            return self.floormod(base, mod)
        # FloorDiv(base, div) is as non-negative as base (div > 0): say so without building it
        return self.floormod(base, mod, printed_a=self.floordiv(base, div))

    def _print_Mod(self, e: sympy.Mod) -> str:
        return self.floormod(*e.args)

    def _fraction(self, e: sympy.Basic) -> tuple[sympy.Expr, sympy.Expr]:
        num, den = sympy.fraction(sympy.together(e.args[0]))
        if isinstance(den, sympy.Integer) and den < 0:
            num, den = -num, -den
        return num, den

    def _print_floor(self, e: sympy.floor) -> str:
        num, den = self._fraction(e)
        return self._print(num) if den == 1 else self.floordiv(num, den)

    def _print_ceiling(self, e: sympy.ceiling) -> str:
        num, den = self._fraction(e)
        if den == 1:
            return self._print(num)
        if nonnegative(num):  # the usual case: one division, no select
            return self.floordiv(num + den - 1, den)
        return f"(-{self.floordiv(-num, den)})"

    def _fold(self, combine, args: tuple) -> str:
        out = self._print(args[0])
        for a in args[1:]:
            out = combine(out, self._print(a))
        return out

    def _print_Min(self, e: sympy.Min) -> str:
        return self._fold(self.minimum, e.args)

    def _print_Max(self, e: sympy.Max) -> str:
        return self._fold(self.maximum, e.args)

    def _print_Relational(self, e: sympy.core.relational.Relational) -> str:
        return f"({self._print(e.lhs)} {e.rel_op} {self._print(e.rhs)})"

    def _print_And(self, e: sympy.And) -> str:
        return self.logical("and", [self._print(a) for a in e.args])

    def _print_Or(self, e: sympy.Or) -> str:
        return self.logical("or", [self._print(a) for a in e.args])

    def _print_Not(self, e: sympy.Not) -> str:
        return self.negate(self._print(e.args[0]))

    def _print_BooleanTrue(self, e: object) -> str:
        return self.boolean(True)

    def _print_BooleanFalse(self, e: object) -> str:
        return self.boolean(False)

    def _print_Piecewise(self, e: sympy.Piecewise) -> str:
        *branches, (last, last_cond) = e.args
        if last_cond != sympy.true:
            raise self.error(f"Piecewise {e} has no otherwise branch ({self.target})")
        out = self._print(last)
        for value, cond in reversed(branches):
            out = self.select(self._print(cond), self._print(value), out)
        return out


class PythonIndexPrinter(IndexPrinter):
    """Plain Python over ints (launchers compute sizes with it): ``//`` and ``%`` already floor."""

    native_floor = True


print_python = PythonIndexPrinter()

__all__ = ["IndexPrinter", "PythonIndexPrinter", "print_python"]
