"""``TORCHKILN_LOGS=recompiles,graph_breaks``: why a cached entry missed ("torchkiln.recompiles") and
where a frame was split ("torchkiln.graph_breaks"), with the user's file:line."""

from __future__ import annotations

import logging
import os
import sys

recompiles_log = logging.getLogger("torchkiln.recompiles")
graph_breaks_log = logging.getLogger("torchkiln.graph_breaks")


def _enabled(name: str) -> bool:
    # Read at call time, so setting the variable in a running process takes effect.
    names = {n.strip().lstrip("+") for n in os.environ.get("TORCHKILN_LOGS", "").split(",")}
    return name in names or "all" in names


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at emit time (it may be replaced after setup)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _ensure_stderr_handler(log: logging.Logger) -> None:
    if not any(getattr(h, "_torchkiln", False) for h in log.handlers):
        h = _StderrHandler()
        h.setFormatter(logging.Formatter(f"[{log.name}] %(message)s"))
        h._torchkiln = True  # type: ignore[attr-defined]
        log.addHandler(h)
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)


def _log(log: logging.Logger, name: str, message: str) -> None:
    if _enabled(name):
        _ensure_stderr_handler(log)
    if log.isEnabledFor(logging.INFO):
        log.info("%s", message)


def log_recompile(message: str) -> None:
    """Log ``message`` at INFO; with TORCHKILN_LOGS naming recompiles, also print it to stderr."""
    _log(recompiles_log, "recompiles", message)


def log_graph_break(message: str) -> None:
    """Log a graph break at INFO; with TORCHKILN_LOGS naming graph_breaks, also print it to stderr."""
    _log(graph_breaks_log, "graph_breaks", message)
