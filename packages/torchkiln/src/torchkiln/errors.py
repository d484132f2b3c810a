"""Typed errors of the meta-package."""

from __future__ import annotations


class TorchkilnError(RuntimeError):
    """Base class of torchkiln's own errors."""


class BackendCompilerFailed(TorchkilnError):
    """The pipeline failed on one graph in strict mode (outside strict mode the graph runs eagerly).

    The message names the stage (aot, loop-ir, codegen, run) and the original error; the original
    exception is chained as ``__cause__``.
    """


class LayerUnavailable(TorchkilnError):
    """A layer the pipeline needs is not installed or does not expose its contract yet."""
