"""The benchmark table (rich): one row per model, a geometric-mean row, a failure summary line."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from torchkiln.bench.runner import Row
from torchkiln.bench.timing import geometric_mean


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def failure_summary(rows: Sequence[Row]) -> str:
    """'N of M models failed: reason (count); ...' or 'all M models passed'."""
    failed = [r for r in rows if r.accuracy != "pass"]
    if not failed:
        return f"all {len(rows)} models passed accuracy"
    reasons = Counter(
        r.accuracy if r.accuracy.startswith("error") else "accuracy fail" for r in failed
    )
    listed = "; ".join(f"{reason} ({n})" for reason, n in reasons.most_common())
    return f"{len(failed)} of {len(rows)} models failed: {listed}"


def render(rows: Sequence[Row], title: str = "torchkiln benchmark", width: int = 200) -> str:
    table = Table(title=title)
    headers = (
        "model",
        "eager ms",
        "torchkiln ms",
        "torch.compile ms",
        "torchkiln speedup",
        "torch.compile speedup",
        "compile s (tk / tc)",
        "peak MB (eager / tk / tc)",
        "graphs / breaks",
        "kernels",
        "accuracy",
    )
    for header in headers:
        table.add_column(header, overflow="fold")
    for r in rows:
        graphs = "-" if r.graphs is None else f"{r.graphs} / {r.graph_breaks}"
        if r.eager_fallbacks:
            graphs += f" ({r.eager_fallbacks} eager)"
        table.add_row(
            f"{r.suite}/{r.model}",
            _num(r.eager_ms, ".3f"),
            _num(r.torchkiln_ms, ".3f"),
            _num(r.inductor_ms, ".3f"),
            _x(r.speedup),
            _x(r.inductor_speedup),
            f"{_num(r.compile_s, '.2f')} / {_num(r.inductor_compile_s, '.2f')}",
            " / ".join(
                _num(v, ".1f") for v in (r.eager_peak_mem_mb, r.peak_mem_mb, r.inductor_peak_mem_mb)
            ),
            graphs,
            _num(r.kernels, "d") + (f" (+{len(r.op_fallbacks)} aten)" if r.op_fallbacks else ""),
            r.accuracy,
        )
    table.add_section()
    table.add_row(
        "geomean",
        "",
        "",
        "",
        _x(geometric_mean([r.speedup for r in rows])),
        _x(geometric_mean([r.inductor_speedup for r in rows])),
        "",
        "",
        "",
        "",
        "",
    )
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None)
    console.print(table)
    console.print(failure_summary(rows))
    if rows and all(r.peak_mem_mb is None for r in rows):
        console.print(
            "peak memory: measured on CUDA only (torch.cuda.max_memory_allocated); '-' on CPU"
        )
    for r in rows:
        for note in r.notes:
            console.print(f"  {r.model}: {note}")
    return buffer.getvalue()
