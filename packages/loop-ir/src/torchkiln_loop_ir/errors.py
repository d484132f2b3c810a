"""Typed errors of the loop IR."""

from __future__ import annotations


class LoopIRError(RuntimeError):
    """Base class of loop-IR errors."""


class LoweringError(LoopIRError):
    """An ATen node could not be lowered and could not fall back to its ATen kernel."""


class Unlowerable(LoopIRError):
    """Raised by a lowering that cannot handle this call; the node becomes a fallback instead."""


class OutputShapeChanged(LoopIRError):
    """A fallback kernel with a data-dependent output size (``nonzero``, ``x[mask]``) returned
    another size than when the graph was traced; the kernels after it were built for that size."""
