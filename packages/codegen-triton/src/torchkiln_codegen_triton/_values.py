"""What the Triton ops handler passes around: named values of the kernel being generated."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .printer import tl_dtype

X = frozenset({"x"})
R = frozenset({"r"})
XR = frozenset({"x", "r"})
NONE: frozenset[str] = frozenset()
#: dtypes a kernel computes in float32 (as eager's kernels do internally), stored back narrow
LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass(frozen=True, eq=False)
class TritonValue:
    """A variable of the generated kernel.

    deps: which block dims it varies along ("x", "r"), so loads/stores broadcast and mask right.
    post: the stage whose reduction it depends on, when it must be computed after that stage's
        r-loop (None when it can be computed inside or before the loop).
    """

    name: str
    dtype: torch.dtype
    deps: frozenset[str]
    post: int | None = None

    def __str__(self) -> str:
        return self.name


def literal(value: object, dtype: torch.dtype) -> str:
    """A Python literal Triton accepts inside ``tl.full`` for ``value`` of ``dtype``."""
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    return str(int(value))  # type: ignore[arg-type]


#: the bits of -0.0, as the signed integer of each float's width
_NEGATIVE_ZERO_BITS = {
    torch.float16: ("tl.int16", -(1 << 15)),
    torch.bfloat16: ("tl.int16", -(1 << 15)),
    torch.float32: ("tl.int32", -(1 << 31)),
    torch.float64: ("tl.int64", -(1 << 63)),
}


def full(value: object, dtype: torch.dtype, shape: str = "[1]") -> str:
    """``tl.full`` of ``value``. A -0.0 is made from its bits: Triton 3.6 turns any float
    constant equal to 0 into +0.0 (``-0.0 == 0``), so ``tl.full([1], -0.0, tl.float32)`` lost
    its sign there (eager's ``where(mask, x, -0.0)`` then gave +0.0)."""
    if dtype in _NEGATIVE_ZERO_BITS and _is_negative_zero(value):
        int_type, bits = _NEGATIVE_ZERO_BITS[dtype]
        return f"tl.full({shape}, {bits}, {int_type}).to({tl_dtype(dtype)}, bitcast=True)"
    return f"tl.full({shape}, {literal(value, dtype)}, {tl_dtype(dtype)})"


def _is_negative_zero(value: object) -> bool:
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0


def lowest(dtype: torch.dtype) -> float | int:
    if dtype.is_floating_point:
        return float("-inf")
    if dtype == torch.bool:
        return 0
    return torch.iinfo(dtype).min


def highest(dtype: torch.dtype) -> float | int:
    if dtype.is_floating_point:
        return float("inf")
    if dtype == torch.bool:
        return 1
    return torch.iinfo(dtype).max
