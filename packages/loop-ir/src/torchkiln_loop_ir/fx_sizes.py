"""Sizes, strides and layouts of the FX graph's values in loop-ir's sympy vocabulary.

torch's ShapeEnv writes integer division and modulo with functions of its own; the code
generators know loop-ir's (``FloorDiv``, ``ModularIndexing``), so every symbolic size the lowering
reads passes through ``to_expr``. ``layout_of`` gives a FakeTensor's layout as eager would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
import torch

from .indexing import FloorDiv, ModularIndexing
from .ir import FixedLayout, contiguous_strides

_TORCH_DIV = ("FloorDiv", "CleanDiv")
_TORCH_MOD = ("PythonMod", "Mod")


def from_torch_sympy(expr: sympy.Expr) -> sympy.Expr:
    """Replace torch's FloorDiv/CleanDiv and PythonMod/Mod (sizes: non-negative) by loop-ir's
    FloorDiv and ModularIndexing."""

    def is_torch(e) -> bool:
        return (
            isinstance(e, sympy.Function)
            and type(e).__module__.startswith("torch")
            and type(e).__name__ in (*_TORCH_DIV, *_TORCH_MOD)
        )

    def ours(e):
        a, b = e.args
        return (
            FloorDiv(a, b)
            if type(e).__name__ in _TORCH_DIV
            else ModularIndexing(a, sympy.Integer(1), b)
        )

    return expr.replace(is_torch, ours) if expr.has(sympy.Function) else expr


def _known_one(node: Any, expr: sympy.Expr) -> bool:
    """Whether the ShapeEnv has proved (by a guard) that a symbolic size is 1: broadcasting reads
    a size-1 dim at index 0, so a size like ``(s0 + 2) // 3`` that the trace broadcast as 1 must be
    1 here too (read at the output's index, it read past its end: a silently wrong result)."""
    env = getattr(node, "shape_env", None)
    evaluate = getattr(env, "_maybe_evaluate_static", None)
    if evaluate is None:
        return False
    try:
        return bool(evaluate(sympy.Eq(expr, 1)) is sympy.true)
    except Exception:  # noqa: BLE001 - an expression the ShapeEnv cannot decide: keep it symbolic
        return False


def to_expr(value: Any) -> sympy.Expr:
    """An int or SymInt as a sympy expression (in loop-ir's vocabulary: torch's ShapeEnv writes
    integer division and modulo with functions of its own, the code generators know ours)."""
    if isinstance(value, torch.SymInt):
        expr = sympy.sympify(value.node.expr)
        if not expr.is_number and _known_one(value.node, expr):
            return sympy.Integer(1)
        return from_torch_sympy(expr)
    if isinstance(value, sympy.Expr):
        return value
    return sympy.Integer(int(value))


def _is_dense(size: Sequence[sympy.Expr], stride: Sequence[sympy.Expr]) -> bool:
    """True if the strides are a permutation of contiguous strides (no gaps, no overlap).

    The innermost dim has stride 1, the next one the size of the first, and so on: each step
    looks for the dim whose stride is the product so far, so symbolic strides (``(1, s0)``, a
    transposed value under dynamic shapes) are decided exactly, with no order of symbols to
    guess. (Sorting by ``int(stride)`` refused them, and such a value was realized contiguous:
    a forward wrote a saved value contiguous that its backward, compiled from the traced
    strides, read transposed.)"""
    remaining = [d for d in range(len(size)) if size[d] != 1]
    expected: sympy.Expr = sympy.Integer(1)
    stride = [_at_least_one_dropped(s) for s in stride]
    while remaining:
        d = next((d for d in remaining if _equal(stride[d], expected)), None)
        if d is None:
            return False
        remaining.remove(d)
        expected = expected * size[d]
    return True


def _at_least_one_dropped(stride: sympy.Expr) -> sympy.Expr:
    """``stride`` with each ``Max(1, e)`` written ``e``. Torch's contiguous strides clamp a size
    at 1 (a dim of size 0); a stride is only ever compared with a product of the other dims'
    sizes, each at least 1 here (size-1 dims are skipped; a symbolic size is at least 2), where
    the clamp changes nothing. (A permuted convolution output under dynamic shapes has strides
    ``(1, s53*Max(1, L), Max(1, L))``: read as not dense, a forward wrote its saved masks
    contiguous that the backward, compiled from the traced strides, read permuted.)"""
    if stride.is_number:
        return stride

    def clamp_at_one(e) -> bool:
        return type(e).__name__ == "Max" and len(e.args) == 2 and sympy.Integer(1) in e.args

    return stride.replace(clamp_at_one, lambda e: next(a for a in e.args if a != 1))


def _equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """``a == b`` for sizes: structurally (integers, the same product), else expanded."""
    return a == b or (not (a.is_Integer and b.is_Integer) and sympy.expand(a - b) == 0)


def layout_of(val: Any, *, dense_only: bool = True) -> FixedLayout:
    """The layout eager would give ``val`` (a FakeTensor), or contiguous when it is not dense."""
    size = tuple(to_expr(s) for s in val.shape)
    stride = tuple(to_expr(s) for s in val.stride())
    if dense_only and not _is_dense(size, stride):
        stride = contiguous_strides(size)
    return FixedLayout(val.device, val.dtype, size, stride)
