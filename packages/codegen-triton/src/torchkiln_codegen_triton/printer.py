"""Triton text for sympy index expressions and for dtypes."""

from __future__ import annotations

import sympy
import torch
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing

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


def texpr(expr: sympy.Expr) -> str:
    """Print an integer index expression as Triton (Python) source text.

    ``FloorDiv(a, b)`` -> ``a // b``; ``ModularIndexing(a, d, m)`` -> ``(a // d) % m``;
    ``Min``/``Max`` -> ``tl.minimum``/``tl.maximum``. Operands are non-negative, so Triton's
    truncating ``//`` and ``%`` agree with Python's.
    """
    expr = sympy.sympify(expr)
    if isinstance(expr, sympy.Integer):
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        return expr.name
    if isinstance(expr, sympy.Add):
        terms = [texpr(a) for a in expr.args]
        return "(" + " + ".join(terms) + ")"
    if isinstance(expr, sympy.Mul):
        coeff, rest = expr.as_coeff_Mul()
        if coeff == -1:
            return f"(-{texpr(rest)})"
        return "(" + " * ".join(texpr(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
        base = texpr(expr.base)
        return "(" + " * ".join([base] * int(expr.exp)) + ")"
    if isinstance(expr, FloorDiv):
        return f"({texpr(expr.args[0])} // {texpr(expr.args[1])})"
    if isinstance(expr, ModularIndexing):
        base, div, mod = (texpr(a) for a in expr.args)
        return f"(({base} // {div}) % {mod})" if div != "1" else f"({base} % {mod})"
    if isinstance(expr, sympy.Mod):
        return f"({texpr(expr.args[0])} % {texpr(expr.args[1])})"
    if isinstance(expr, (sympy.Min, sympy.Max)):
        fn = "tl.minimum" if isinstance(expr, sympy.Min) else "tl.maximum"
        args = [texpr(a) for a in expr.args]
        out = args[0]
        for a in args[1:]:
            out = f"{fn}({out}, {a})"
        return out
    raise CodegenError(f"cannot print index expression {expr!r} ({type(expr).__name__}) for Triton")


def pyexpr(expr: sympy.Expr) -> str:
    """Print a size expression as plain Python (for the launcher: sizes are ints there)."""
    expr = sympy.sympify(expr)
    if isinstance(expr, (sympy.Min, sympy.Max)):
        fn = "min" if isinstance(expr, sympy.Min) else "max"
        return f"{fn}({', '.join(pyexpr(a) for a in expr.args)})"
    return texpr(expr)
