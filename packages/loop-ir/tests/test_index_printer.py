"""The shared index printer: the printed text means what sympy means, for random integers,
negative numerators included, both where the target's ``//`` floors (Python) and where it
truncates (C and Triton; simulated here). The repository's tests/test_index_printers.py runs the
same expressions through the real C++ and Triton printers and compilers."""

from __future__ import annotations

import math
import random
import zlib

import pytest
import sympy
from torchkiln_loop_ir.errors import CodegenError
from torchkiln_loop_ir.index_printer import IndexPrinter, PythonIndexPrinter, nonnegative
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing, index_symbol

x0, x1, s0 = index_symbol("x", 0), index_symbol("x", 1), index_symbol("s", 0)
n = sympy.Symbol("n", integer=True)  # no sign: numerators below zero

EXPRESSIONS = [
    FloorDiv(n, 3),
    FloorDiv(n - 5, 4),
    FloorDiv(x0 - x1, 3),
    FloorDiv(x0 + 3 * x1, s0),
    FloorDiv(FloorDiv(n, 2) - 1, 3),
    ModularIndexing(n, 2, 5),
    ModularIndexing(x0 - 20, 3, 7),
    ModularIndexing(x0, s0, 4),
    ModularIndexing(n, 1, 6),
    sympy.Mod(n, 6),
    sympy.Mod(x0 - x1, s0),
    sympy.Min(x0, s0, 7) - sympy.Max(n, -3),
    sympy.floor(n / 3),
    sympy.floor(sympy.Rational(3, 4) * x0),
    sympy.ceiling(n / 4),
    sympy.ceiling(x0 / s0),
    sympy.Piecewise((x0 - 1, x0 > x1), (n, True)),
    sympy.And(x0 < s0, sympy.Ne(n, 2)),
    sympy.Or(n >= 0, sympy.Eq(x1, 3)),
    sympy.Not(sympy.And(x0 < s0, n > 2), evaluate=False),
    (x0 - 3) ** 2 + 2 - 3 * n,
]
SYMBOLS = (n, x0, x1, s0)


def random_values(rng: random.Random) -> dict[sympy.Symbol, int]:
    # the symbols' assumptions hold (loop variables >= 0, sizes >= 1); n takes any sign
    return {
        n: rng.randint(-60, 60),
        x0: rng.randint(0, 60),
        x1: rng.randint(0, 60),
        s0: rng.randint(1, 20),
    }


def reference(expr: sympy.Basic, values: dict[sympy.Symbol, int]) -> int:
    out = expr.subs(values)
    if out in (sympy.true, sympy.false):
        return int(bool(out))
    return int(out)


def _tdiv(a: int, b: int) -> int:
    """C's and Triton's integer division: toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _tmod(a: int, b: int) -> int:
    return a - b * _tdiv(a, b)


class TruncatingPrinter(IndexPrinter):
    """The base printer's spelling with C's division and remainder, as Python calls."""

    def div(self, a: str, b: str) -> str:
        return f"tdiv({a}, {b})"

    def mod(self, a: str, b: str) -> str:
        return f"tmod({a}, {b})"


@pytest.mark.parametrize(
    "printer", [PythonIndexPrinter(), TruncatingPrinter()], ids=["floor", "truncating"]
)
@pytest.mark.parametrize("expr", EXPRESSIONS, ids=[str(e) for e in EXPRESSIONS])
def test_printed_text_evaluates_like_sympy(printer, expr):
    code = compile(printer(expr), "<index>", "eval")
    rng = random.Random(zlib.crc32(str(expr).encode()))
    for _ in range(40):
        values = random_values(rng)
        scope = {"tdiv": _tdiv, "tmod": _tmod, **{s.name: v for s, v in values.items()}}
        assert int(eval(code, scope)) == reference(expr, values), (printer(expr), values)  # noqa: S307


def test_truncating_helpers_are_c_semantics():
    for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 3)]:
        assert _tdiv(a, b) == math.trunc(a / b) and _tmod(a, b) == math.fmod(a, b)


def test_non_negative_numerators_print_one_plain_division():
    printer = TruncatingPrinter()
    plain = printer(FloorDiv(x0 + 3 * x1, 4))
    assert plain.startswith("tdiv(") and plain.count("tdiv") == 1 and " if " not in plain
    assert printer(ModularIndexing(x0, 2, 8)) == "tmod(tdiv(x0, 2), 8)"
    assert printer(ModularIndexing(x0, 1, 8)) == "tmod(x0, 8)"
    # FloorDiv calls itself non-negative; the printer checks its numerator instead
    assert not nonnegative(FloorDiv(x0 - 1, 2) + 1) and nonnegative(FloorDiv(x0, 2) + x1)
    assert "if" in printer(FloorDiv(x0 - 1, 2))


@pytest.mark.parametrize(
    "bad",
    [
        x0 / 2,
        sympy.Float(1.5) * x0,
        x0**-1,
        2**x0,
        sympy.sin(x0),
        FloorDiv(x0, -2, evaluate=False),
        sympy.Piecewise((x0, x0 > 1), (x1, x1 > 2)),
    ],
)
def test_what_is_not_integer_index_arithmetic_is_refused(bad):
    with pytest.raises(CodegenError, match="Python"):
        PythonIndexPrinter()(bad)
