"""The compiler: torchkiln.compile, the torch.compile backend, CUDA graphs and the command line."""

__version__ = "0.9.34"

from torchkiln_dynamo_capture import allow_in_graph, disable, mark_dynamic, mark_static

from torchkiln.api import CompiledFunction, CompiledModule, compile, explain, report, reset
from torchkiln.backend import backend
from torchkiln.errors import (
    BackendCompilerFailed,
    FailedAfterEffects,
    LayerUnavailable,
    TorchkilnError,
)
from torchkiln.options import CompileOptions
from torchkiln.pipeline import make_backend
from torchkiln.report import CompileReport, EagerFallback, GraphReport

__all__ = [
    "BackendCompilerFailed",
    "CompileOptions",
    "CompileReport",
    "CompiledFunction",
    "CompiledModule",
    "EagerFallback",
    "FailedAfterEffects",
    "GraphReport",
    "LayerUnavailable",
    "TorchkilnError",
    "allow_in_graph",
    "backend",
    "compile",
    "disable",
    "explain",
    "make_backend",
    "mark_dynamic",
    "mark_static",
    "report",
    "reset",
]
