"""The lowering registry: ATen op -> function building loop IR.

A lowering is called as ``fn(ctx, *args, **kwargs)`` with ``ctx`` a ``LoweringContext`` and the
node's arguments (IR values for tensors, sympy expressions for symbolic sizes, constants). It
returns an IR value (or a tuple of them), or raises ``Unlowerable`` to fall back to ATen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

LOWERINGS: dict[Any, Callable[..., Any]] = {}

aten = torch.ops.aten
prims = torch.ops.prims


def register_lowering(*targets: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``fn`` for each target (an OpOverload, or an OpOverloadPacket for all overloads)."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        for t in targets:
            LOWERINGS[t] = fn
        return fn

    return wrap


from . import (  # noqa: E402, F401  (fill LOWERINGS, after register_lowering exists)
    control_flow,
    convolution,
    copies,
    extern,
    indexing,
    pointwise,
    pooling,
    random,
    reductions,
    scalars,
    strided,
    view_scatter,
    views,
)

__all__ = ["LOWERINGS", "register_lowering"]
