"""C++ text for dtypes, constants and sympy index expressions."""

from __future__ import annotations

import math

import sympy
import torch
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing

from .errors import CodegenError

# dtype -> (storage type in memory, compute type in registers). half and bfloat16 are stored as
# their 16 bits and computed in float, so no compiler half support is needed.
DTYPES: dict[torch.dtype, tuple[str, str]] = {
    torch.float32: ("float", "float"),
    torch.float64: ("double", "double"),
    torch.float16: ("uint16_t", "float"),
    torch.bfloat16: ("uint16_t", "float"),
    torch.int8: ("int8_t", "int8_t"),
    torch.int16: ("int16_t", "int16_t"),
    torch.int32: ("int32_t", "int32_t"),
    torch.int64: ("int64_t", "int64_t"),
    torch.uint8: ("uint8_t", "uint8_t"),
    torch.bool: ("bool", "bool"),
}


def storage_type(dtype: torch.dtype) -> str:
    try:
        return DTYPES[dtype][0]
    except KeyError:
        raise CodegenError(f"the C++ backend does not support dtype {dtype}") from None


def compute_type(dtype: torch.dtype) -> str:
    try:
        return DTYPES[dtype][1]
    except KeyError:
        raise CodegenError(f"the C++ backend does not support dtype {dtype}") from None


def constant(value: object, dtype: torch.dtype) -> str:
    """A C++ literal of ``value`` in the compute type of ``dtype``."""
    ctype = compute_type(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return f"std::numeric_limits<{ctype}>::quiet_NaN()"
        if math.isinf(v):
            sign = "-" if v < 0 else ""
            return f"{sign}std::numeric_limits<{ctype}>::infinity()"
        return f"static_cast<{ctype}>({v!r})"
    v = int(value)  # type: ignore[arg-type]
    if v == -(2**63):
        return "static_cast<int64_t>(-9223372036854775807LL - 1)"
    return f"static_cast<{ctype}>({v}LL)"


class IndexPrinter:
    """Prints sympy index expressions as int64 C++ arithmetic.

    Symbols print as their names (loop variables, size arguments and indirect indices are all
    int64_t variables of those names in the generated code).
    """

    def __call__(self, expr: object) -> str:
        return self.print(sympy.sympify(expr))

    def print(self, e: sympy.Expr) -> str:
        if isinstance(e, sympy.Integer):
            v = int(e)
            return f"{v}LL" if v >= 0 else f"({v}LL)"
        if isinstance(e, sympy.Symbol):
            return e.name
        if isinstance(e, sympy.Add):
            terms = [self.print(a) for a in e.args]
            return "(" + " + ".join(terms) + ")"
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff == -1:
                return f"(-{self.print(rest)})"
            if not isinstance(coeff, sympy.Integer) and coeff != 1:
                raise CodegenError(f"non-integer coefficient in index expression {e}")
            return "(" + " * ".join(self.print(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow):
            base, exp = e.args
            if isinstance(exp, sympy.Integer) and int(exp) > 0:
                return "(" + " * ".join([self.print(base)] * int(exp)) + ")"
            raise CodegenError(f"cannot print power {e} in an index expression")
        if isinstance(e, FloorDiv):
            a, b = e.args
            return (
                f"(static_cast<int64_t>({self.print(a)}) / static_cast<int64_t>({self.print(b)}))"
            )
        if isinstance(e, ModularIndexing):
            a, d, m = e.args
            return f"(({self.print(a)} / {self.print(d)}) % {self.print(m)})"
        if isinstance(e, sympy.Min):
            return self._fold("std::min<int64_t>", e.args)
        if isinstance(e, sympy.Max):
            return self._fold("std::max<int64_t>", e.args)
        if isinstance(e, sympy.Mod):
            a, m = e.args
            return f"({self.print(a)} % {self.print(m)})"
        if isinstance(e, sympy.floor):
            # floor(p/q * rest) of non-negative integers, as some simplifications leave it
            coeff, rest = sympy.sympify(e.args[0]).as_coeff_Mul()
            if isinstance(coeff, sympy.Rational) and coeff > 0:
                p, q = coeff.p, coeff.q
                num = self.print(rest) if p == 1 else f"({p}LL * {self.print(rest)})"
                return f"({num} / {q}LL)"
            raise CodegenError(f"cannot print {e} in an index expression")
        if isinstance(e, sympy.core.relational.Relational):
            return f"({self.print(e.lhs)} {e.rel_op} {self.print(e.rhs)})"
        if isinstance(e, sympy.And):
            return "(" + " && ".join(self.print(a) for a in e.args) + ")"
        if isinstance(e, sympy.Or):
            return "(" + " || ".join(self.print(a) for a in e.args) + ")"
        if isinstance(e, sympy.Not):
            return f"(!{self.print(e.args[0])})"
        if e is sympy.true:
            return "true"
        if e is sympy.false:
            return "false"
        raise CodegenError(f"cannot print index expression {e} ({type(e).__name__})")

    def _fold(self, fn: str, args: tuple) -> str:
        out = self.print(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self.print(a)})"
        return out


print_index = IndexPrinter()
