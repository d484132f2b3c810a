"""Typed errors of the loop IR."""

from __future__ import annotations


class LoopIRError(RuntimeError):
    """Base class of loop-IR errors."""


class LoweringError(LoopIRError):
    """An ATen node could not be lowered and could not fall back to its ATen kernel."""


class Unlowerable(LoopIRError):
    """Raised by a lowering that cannot handle this call; the node becomes a fallback instead."""
