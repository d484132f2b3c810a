"""C++ text for dtypes, constants and sympy index expressions."""

from __future__ import annotations

import math

import torch
from torchkiln_loop_ir.index_printer import IndexPrinter

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


class CppIndexPrinter(IndexPrinter):
    """Index expressions as int64 C++: loop-IR's shared semantics (``torchkiln_loop_ir.index_printer``)
    in C++ spelling. Symbols print as their names (loop variables, size arguments and indirect
    indices are all int64_t variables of those names in the generated code); ``/`` and ``%``
    truncate, which the base printer accounts for."""

    target = "C++"
    error = CodegenError

    def integer(self, value: int) -> str:
        return f"{value}LL" if value >= 0 else f"({value}LL)"

    def div(self, a: str, b: str) -> str:
        return f"({a} / {b})"

    def minimum(self, a: str, b: str) -> str:
        return f"std::min<int64_t>({a}, {b})"

    def maximum(self, a: str, b: str) -> str:
        return f"std::max<int64_t>({a}, {b})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"({cond} ? {a} : {b})"

    def logical(self, op: str, operands: list[str]) -> str:
        return "(" + (" && " if op == "and" else " || ").join(operands) + ")"

    def negate(self, a: str) -> str:
        return f"(!{a})"

    def boolean(self, value: bool) -> str:
        return "true" if value else "false"


IndexPrinter = CppIndexPrinter  # the name this module exported before the shared base existed
print_index = CppIndexPrinter()
