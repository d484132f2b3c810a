"""The meta-package's log artifact ``output_code`` (TORCHKILN_LOGS=output_code): the generated
wrapper and kernel sources of each compiled graph, forward and backward, with the paths they were
written to. Names and handlers are the one registry's, ``torchkiln_guards.logs``."""

from __future__ import annotations

import logging
from typing import Any

from torchkiln_guards.logs import enabled, log_artifact, logger


def log_output_code(graph_index: int, part: str, compiled: Any) -> None:
    """Log ``compiled`` (a loop-ir CompiledGraph: ``wrapper_source``, ``source_path``,
    ``kernels`` with ``.path``/``.source``) as graph ``graph_index``'s ``part`` ("forward" or
    "backward"). Builds the text only when someone listens."""
    if not enabled("output_code") and not logger("output_code").isEnabledFor(logging.INFO):
        return
    wrapper_path = getattr(compiled, "source_path", "") or "(not on disk)"
    lines = [
        f"graph {graph_index} {part}: wrapper {wrapper_path}",
        str(getattr(compiled, "wrapper_source", "") or "").rstrip(),
    ]
    for number, kernel in enumerate(getattr(compiled, "kernels", ()) or ()):
        path = getattr(kernel, "path", "") or "(not on disk)"
        lines.append(f"graph {graph_index} {part}: kernel {number}: {path}")
        source = getattr(kernel, "source", None)
        if source:
            lines.append(str(source).rstrip())
    log_artifact("output_code", "\n".join(lines))
