"""``TORCHKILN_LOGS=guards``: log generated guard code through the "torchkiln.guards" logger."""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("torchkiln.guards")


def _enabled() -> bool:
    # Read at call time, so setting the variable in a running process takes effect.
    names = {n.strip().lstrip("+") for n in os.environ.get("TORCHKILN_LOGS", "").split(",")}
    return "guards" in names or "all" in names


def _stderr_handler() -> logging.Handler:
    for h in log.handlers:
        if getattr(h, "_torchkiln", False):
            return h
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[torchkiln.guards] %(message)s"))
    h._torchkiln = True  # type: ignore[attr-defined]
    log.addHandler(h)
    return h


def log_guard_source(source: str) -> None:
    """Log ``source`` at INFO; with TORCHKILN_LOGS naming guards, also print it to stderr."""
    if _enabled():
        _stderr_handler()
        if log.level == logging.NOTSET or log.level > logging.INFO:
            log.setLevel(logging.INFO)
    if log.isEnabledFor(logging.INFO):
        log.info("generated guard check:\n%s", source)
