"""Symbolic evaluation of Python bytecode into FX graphs, with guards and graph breaks (TorchDynamo)."""

from .exc import RecompileLimitExceeded, Unsupported
from .explain import ExplainOutput, explain
from .wrapper import CacheEntry, CapturedFunction, CapturedModule, capture

__version__ = "0.2.0"

__all__ = [
    "CacheEntry", "CapturedFunction", "CapturedModule", "ExplainOutput", "RecompileLimitExceeded", "Unsupported",
    "capture", "explain",
]
