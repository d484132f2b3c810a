"""Triton text for sympy index expressions and for dtypes."""

from __future__ import annotations

import torch
from torchkiln_loop_ir.index_printer import IndexPrinter, print_python

from .errors import CodegenError

TL_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    try:
        return TL_DTYPES[dtype]
    except KeyError:
        raise CodegenError(f"the Triton backend does not support dtype {dtype}") from None


class TritonIndexPrinter(IndexPrinter):
    """Index expressions as Triton source: loop-IR's shared semantics
    (``torchkiln_loop_ir.index_printer``) in Triton spelling. On Triton tensors ``//`` and ``%``
    truncate toward zero (C's semantics, not Python's), which the base printer accounts for;
    ``and``/``or`` cannot combine tensors, so logic is bitwise on booleans."""

    target = "Triton"
    error = CodegenError

    def minimum(self, a: str, b: str) -> str:
        return f"tl.minimum({a}, {b})"

    def maximum(self, a: str, b: str) -> str:
        return f"tl.maximum({a}, {b})"

    def select(self, cond: str, a: str, b: str) -> str:
        return f"tl.where({cond}, {a}, {b})"

    def logical(self, op: str, operands: list[str]) -> str:
        return "(" + (" & " if op == "and" else " | ").join(operands) + ")"

    def negate(self, a: str) -> str:
        return f"({a} == 0)"


texpr = TritonIndexPrinter()
"""Print an integer index expression as Triton source text."""

pyexpr = print_python
"""Print a size expression as plain Python (for the launcher: sizes are ints there)."""
