"""Typed errors of the meta-package."""

from __future__ import annotations

from torchkiln_dynamo_capture import BackendError


class TorchkilnError(RuntimeError):
    """Base class of torchkiln's own errors."""


class BackendCompilerFailed(TorchkilnError, BackendError):
    """The pipeline failed on one graph in strict mode (outside strict mode the graph runs eagerly).

    The message names the stage (aot, loop-ir, codegen, run) and the original error; the original
    exception is chained as ``__cause__``.
    """


class LayerUnavailable(TorchkilnError):
    """A layer the pipeline needs is not installed or does not expose its contract yet."""


class FailedAfterEffects(TorchkilnError):
    """A compiled graph or function failed after it may have had effects the user can see (input
    mutations written back, Python code of the function run). torchkiln does not re-run it
    eagerly, which would repeat those effects; the original error is chained as ``__cause__``,
    and later calls run eagerly."""
