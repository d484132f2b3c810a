"""The meta-package's log artifacts: ``output_code`` (the generated wrapper and kernel sources of
each compiled graph, forward and backward, with the paths they were written to), ``aot_graphs``,
``loop_ir``, ``schedule``, ``fusion`` and ``perf_hints``. Each is read from what the pipeline
already holds (the ATen graph handed to the compiler, the loop-ir ``CompiledGraph``); the text is
built only when someone listens. Names and handlers are the one registry's,
``torchkiln_guards.logs``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from torchkiln_guards.logs import enabled, log_artifact, logger


def _listening(name: str) -> bool:
    return enabled(name) or logger(name).isEnabledFor(logging.INFO)


def _log(name: str, build: Callable[[], str]) -> None:
    if _listening(name):
        log_artifact(name, build())


def log_output_code(graph_index: int, part: str, compiled: Any) -> None:
    """Log ``compiled`` (a loop-ir CompiledGraph: ``wrapper_source``, ``source_path``,
    ``kernels`` with ``.path``/``.source``) as graph ``graph_index``'s ``part`` ("forward" or
    "backward")."""

    def build() -> str:
        wrapper_path = getattr(compiled, "source_path", "") or "(not on disk)"
        lines = [
            f"graph {graph_index} {part}: wrapper {wrapper_path}",
            str(getattr(compiled, "wrapper_source", "") or "").rstrip(),
        ]
        shown: dict[tuple[str, str], int] = {}  # (path, function) -> the kernel that showed it
        for number, kernel in enumerate(getattr(compiled, "kernels", ()) or ()):
            path = getattr(kernel, "path", "") or "(not on disk)"
            lines.append(f"graph {graph_index} {part}: kernel {number}: {path}")
            function = getattr(kernel, "function_name", None)
            if function and (path, function) in shown:  # one function, several launch sites
                lines.append(f"# launches {function}, shown at kernel {shown[path, function]}")
                continue
            if function:
                shown[path, function] = number
            source = getattr(kernel, "source", None)
            if source:
                lines.append(str(source).rstrip())
        return "\n".join(lines)

    _log("output_code", build)


def log_aot_graph(graph_index: int, part: str, aten_gm: Any) -> None:
    """Log the ATen ``part`` graph aot-partition hands the compiler (artifact ``aot_graphs``)."""
    _log(
        "aot_graphs",
        lambda: (
            f"graph {graph_index} ATen {part}:\n"
            + aten_gm.print_readable(print_output=False).rstrip()
        ),
    )


def log_compiled_stages(graph_index: int, part: str, compiled: Any) -> None:
    """Log the loop IR, the schedule and the fusion decisions of a loop-ir CompiledGraph
    (artifacts ``loop_ir``, ``schedule``, ``fusion``)."""
    head = f"graph {graph_index} {part}"

    def loop_ir() -> str:
        graph_ir = getattr(compiled, "graph_ir", None)
        text = (
            str(graph_ir) if graph_ir is not None else "(loaded from the graph cache: not lowered)"
        )
        return f"{head} loop IR:\n{text.rstrip()}"

    _log("loop_ir", loop_ir)
    _log("schedule", lambda: f"{head} schedule:\n{compiled.schedule_text().rstrip()}")
    _log("fusion", lambda: f"{head} fusion decisions:\n{compiled.fusion_text().rstrip()}")


def log_perf_hints(graph_index: int, hints: list[str]) -> None:
    """Log a graph's perf hints (artifact ``perf_hints``), one a line; nothing when none."""
    if hints:
        _log("perf_hints", lambda: "\n".join(f"graph {graph_index}: {h}" for h in hints))
