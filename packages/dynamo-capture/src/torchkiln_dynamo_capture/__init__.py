"""Symbolic evaluation of Python bytecode into FX graphs, with guards and graph breaks (TorchDynamo)."""

from .exc import BackendError, FailOnRecompileLimitHit, RecompileLimitExceeded, Unsupported
from .explain import ExplainOutput, explain
from .module_proxy import CapturedModule, ModuleProxy
from .trace_rules import allow_in_graph, disable, mark_dynamic, mark_static
from .wrapper import CacheEntry, CapturedFunction, capture

__version__ = "0.9.13"

__all__ = [
    "BackendError",
    "CacheEntry",
    "FailOnRecompileLimitHit",
    "CapturedFunction",
    "CapturedModule",
    "ExplainOutput",
    "ModuleProxy",
    "RecompileLimitExceeded",
    "Unsupported",
    "allow_in_graph",
    "capture",
    "disable",
    "explain",
    "mark_dynamic",
    "mark_static",
]
