"""Capture's log artifacts, ``recompiles`` and ``graph_breaks`` (TORCHKILN_LOGS): why a cached entry
missed and where a frame was split, with the user's file:line. Names, parsing and handlers are the
one registry's, ``torchkiln_guards.logs``."""

from __future__ import annotations

from torchkiln_guards.logs import check_log_names, log_artifact, logger

recompiles_log = logger("recompiles")
graph_breaks_log = logger("graph_breaks")

__all__ = ["check_log_names", "log_graph_break", "log_recompile"]


def log_recompile(message: str) -> None:
    """Log ``message`` at INFO; with TORCHKILN_LOGS naming recompiles, also print it to stderr."""
    log_artifact("recompiles", message)


def log_graph_break(message: str) -> None:
    """Log a graph break at INFO; with TORCHKILN_LOGS naming graph_breaks, also print it to stderr."""
    log_artifact("graph_breaks", message)
