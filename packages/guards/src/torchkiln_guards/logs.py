"""``TORCHKILN_LOGS``: the one registry of torchkiln's log artifacts, for every package.

``TORCHKILN_LOGS=recompiles,guards`` (a comma list, read at each use so setting it in a running
process takes effect) prints those artifacts to stderr, each on its logger ``torchkiln.<name>``;
``all`` names every artifact. An unknown name raises ``UnknownLogName`` listing the valid ones,
so a misspelt name never silently logs nothing. This lives in the lowest package that logs
(guards); capture and the meta-package import it. A package that adds an artifact adds its name
to ``ARTIFACTS`` here, so every package validates against the same list whichever is imported.
"""

from __future__ import annotations

import logging
import os
import sys

ENV_VAR = "TORCHKILN_LOGS"

#: artifact name -> what it prints (and which package emits it)
ARTIFACTS: dict[str, str] = {
    "guards": "each cache entry's generated guard check function (guards)",
    "recompiles": "each recompile, with the guard that failed (dynamo-capture)",
    "graph_breaks": "each graph break, with the user's file:line and reason (dynamo-capture)",
    "output_code": "the generated wrapper and kernel sources (with their paths) of each "
    "compiled forward and backward graph (torchkiln)",
    "aot_graphs": "the ATen forward and backward graphs aot-partition hands the compiler "
    "(torchkiln)",
    "loop_ir": "the lowered loop IR of each compiled ATen graph (torchkiln)",
    "schedule": "the schedule of each compiled ATen graph: kernels, stages, extern calls, "
    "frees (torchkiln)",
    "fusion": "every fusion decision of the scheduler, each rejected one with its reason "
    "(torchkiln)",
    "perf_hints": "what likely costs speed in a compiled graph: ATen fallbacks, unfused "
    "reductions and producer/consumer pairs, early fusion stops (torchkiln)",
}
ALL = "all"


class UnknownLogName(ValueError):
    """TORCHKILN_LOGS names an artifact no torchkiln package emits."""


def requested() -> frozenset[str]:
    """The artifact names ``TORCHKILN_LOGS`` asks for (``all`` expanded); raises
    ``UnknownLogName`` for a name that is not an artifact."""
    names = {n.strip().lstrip("+") for n in os.environ.get(ENV_VAR, "").split(",")}
    names.discard("")
    unknown = sorted(names - set(ARTIFACTS) - {ALL})
    if unknown:
        valid = ", ".join([*sorted(ARTIFACTS), ALL])
        raise UnknownLogName(
            f"{ENV_VAR} names unknown log artifact(s) {', '.join(map(repr, unknown))}; "
            f"valid names: {valid}"
        )
    return frozenset(ARTIFACTS) if ALL in names else frozenset(names)


def check_log_names() -> None:
    """Raise ``UnknownLogName`` now if ``TORCHKILN_LOGS`` is wrong (entry points call this so the
    error reaches the user instead of surfacing inside a compile, where it would fall back)."""
    requested()


def enabled(name: str) -> bool:
    """Whether ``TORCHKILN_LOGS`` asks for artifact ``name`` (which must be registered)."""
    if name not in ARTIFACTS:
        raise UnknownLogName(f"{name!r} is not a registered log artifact ({', '.join(ARTIFACTS)})")
    return name in requested()


def logger(name: str) -> logging.Logger:
    """The logger of artifact ``name``: ``torchkiln.<name>``."""
    return logging.getLogger(f"torchkiln.{name}")


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


def log_artifact(name: str, message: str) -> None:
    """Log ``message`` at INFO on ``torchkiln.<name>``; when TORCHKILN_LOGS names it, also print
    it to stderr. (Without the variable, a handler the user set at INFO still receives it.)"""
    log = logger(name)
    if enabled(name):
        _ensure_stderr_handler(log)
    if log.isEnabledFor(logging.INFO):
        log.info("%s", message)


def log_guard_source(source: str) -> None:
    """Log a generated guard check (artifact ``guards``)."""
    log_artifact("guards", f"generated guard check:\n{source}")
