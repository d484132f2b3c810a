"""The benchmark table (rich): one row per model, a geometric-mean row, a failure summary line,
and a warning when a timing's runs disagree (each timing shows its median and min-max)."""

from __future__ import annotations

import io
import shutil
from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from torchkiln.bench.runner import Row
from torchkiln.bench.timing import NOISY_IQR, Spread, geometric_mean


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _ms(row: Row, variant: str, value: float | None) -> str:
    """A median with its runs' range: ``12.345 (11.9-13.1)``; a ``!`` marks a noisy timing."""
    if value is None:
        return "-"
    spread = row.spreads.get(variant)
    if not spread:
        return f"{value:.3f}"
    noisy = Spread(**spread).noisy()
    return f"{value:.3f} ({spread['low']:.3g}-{spread['high']:.3g}){'!' if noisy else ''}"


def noisy_warning(rows: Sequence[Row]) -> str:
    """One warning naming every timing whose runs disagree by more than NOISY_IQR, or ""."""
    noisy = [
        f"{r.model} {variant} ({Spread(**s).relative_iqr:.0%})"
        for r in rows for variant, s in r.spreads.items() if Spread(**s).noisy()
    ]
    if not noisy:
        return ""
    return (
        f"warning: {len(noisy)} timing(s) marked ! disagree across runs by more than "
        f"{NOISY_IQR:.0%} of the median (interquartile range): {', '.join(noisy)}; their "
        "speedups are not a result"
    )


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


#: the columns every table keeps, even when all their cells are empty
KEPT_COLUMNS = ("model", "accuracy")
#: the characters a rendered table line ends with when rich did not crop it
_RIGHT_EDGES = frozenset("┓┃┩│┤┘┫╇")


def _cells(r: Row) -> dict[str, str]:
    graphs = "-" if r.graphs is None else f"{r.graphs} / {r.graph_breaks}"
    if r.eager_fallbacks:
        graphs += f" ({r.eager_fallbacks} eager)"
    return {
        "model": f"{r.suite}/{r.model}",
        "eager ms": _ms(r, "eager", r.eager_ms),
        "torchkiln ms": _ms(r, "torchkiln", r.torchkiln_ms),
        "torch.compile ms": _ms(r, "inductor", r.inductor_ms),
        "torchkiln speedup": _x(r.speedup),
        "torch.compile speedup": _x(r.inductor_speedup),
        "compile s (tk / tc)": f"{_num(r.compile_s, '.2f')} / {_num(r.inductor_compile_s, '.2f')}",
        "peak MB (eager / tk / tc)": " / ".join(
            _num(v, ".1f") for v in (r.eager_peak_mem_mb, r.peak_mem_mb, r.inductor_peak_mem_mb)
        ),
        "graphs / breaks": graphs,
        "kernels": _num(r.kernels, "d") + (f" (+{len(r.op_fallbacks)} aten)" if r.op_fallbacks else ""),
        "accuracy": r.accuracy,
    }


def _table(title: str, headers: list[str], cells: list[dict[str, str]], geomean: dict[str, str],
           minimum: dict[str, int]) -> Table:
    table = Table(title=title)
    for header in headers:
        table.add_column(header, overflow="fold", min_width=minimum.get(header))
    for c in cells:
        table.add_row(*(c[h] for h in headers))
    table.add_section()
    table.add_row(*(geomean.get(h, "") for h in headers))
    return table


def _fits(table: Table, width: int) -> bool:
    """Whether ``table`` renders within ``width`` without rich cropping its right edge."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None).print(table)
    lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
    return all(line[-1] in _RIGHT_EDGES for line in lines if line and line[0] in "┏┃┡│├└")


def _empty(cell: str) -> bool:
    return not cell.replace("-", "").replace("/", "").strip()


def render(rows: Sequence[Row], title: str = "torchkiln benchmark", width: int | None = None) -> str:
    """The table, ``width`` columns wide (default: the terminal's, 120 when not a terminal).

    Columns empty in every row (torch.compile's when the peer did not run, peak memory on CPU)
    are left out; model names and speedups keep their width while it fits, and the other cells
    fold. Timings are medians with the (min-max) of their runs."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    cells = [_cells(r) for r in rows]
    geomean = {
        "model": "geomean",
        "torchkiln speedup": _x(geometric_mean([r.speedup for r in rows])),
        "torch.compile speedup": _x(geometric_mean([r.inductor_speedup for r in rows])),
    }
    headers = [h for h in _cells(Row("", "", "", "", 0)) if h in KEPT_COLUMNS
               or any(not _empty(c[h]) for c in cells) or not _empty(geomean.get(h, ""))]
    longest = {h: max([len(geomean.get(h, "")), *(len(c[h]) for c in cells)]) for h in headers}
    minimum = {h: min(32, longest[h]) for h in ("model", "torchkiln speedup", "torch.compile speedup")
               if h in headers}
    # rich crops a table whose kept widths leave too little room: keep fewer widths, the model
    # name (what a reader looks for) the longest
    for kept in (minimum, {k: v for k, v in minimum.items() if k == "model"}, {}):
        table = _table(title, headers, cells, geomean, kept)
        if _fits(table, width):
            break
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None)
    console.print(table)
    console.print(failure_summary(rows))
    warning = noisy_warning(rows)
    if warning:
        console.print(warning)
    if rows and all(r.peak_mem_mb is None for r in rows):
        console.print(
            "peak memory: measured on CUDA only (torch.cuda.max_memory_allocated); '-' on CPU"
        )
    for r in rows:
        for note in r.notes:
            console.print(f"  {r.model}: {note}")
    return buffer.getvalue()
