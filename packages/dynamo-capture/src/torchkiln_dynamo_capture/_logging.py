"""``TORCHKILN_LOGS=recompiles``: why a cached entry missed, on the "torchkiln.recompiles" logger."""

from __future__ import annotations

import logging
import os
import sys

recompiles_log = logging.getLogger("torchkiln.recompiles")


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


def log_recompile(message: str) -> None:
    """Log ``message`` at INFO; with TORCHKILN_LOGS naming recompiles, also print it to stderr."""
    if _enabled("recompiles"):
        _ensure_stderr_handler(recompiles_log)
    if recompiles_log.isEnabledFor(logging.INFO):
        recompiles_log.info("%s", message)
