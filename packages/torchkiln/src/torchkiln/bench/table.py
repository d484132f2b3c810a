"""The benchmark table (rich): one row per model, a geometric-mean row, a failure summary line,
a line counting where torchkiln is ahead of, behind or tied with torch.compile, and a warning
naming the paired ratios whose interval is wide.

Each timing shows its median and ± half its runs' interquartile range; each speedup is the
median of the per-round ratios with its interval (``paired``), marked ``!`` when that interval
is wider than ``paired.NOISY_WIDTH`` of the median; "tk vs tc" is torch.compile's time over
torchkiln's, round by round, with its verdict. A training step's row adds the bytes saved for
the backward (eager's and torchkiln's), splits kernels and ATen fallbacks into forward+backward,
and marks torchkiln's peak memory ``!`` where it is above eager's (``TRAIN_LEGEND``)."""

from __future__ import annotations

import io
import shutil
from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from torchkiln.bench import paired
from torchkiln.bench.record import Row, peak_above_eager
from torchkiln.bench.timing import geometric_mean

#: the table's header of each paired ratio (the warning names ratios by it); the headers are
#: short (tk: torchkiln, tc: torch.compile: ``legend`` under the table) so the cells need not fold
COLUMN_OF = {"speedup": "tk speedup", "inductor_speedup": "tc speedup", "vs_inductor": "tk vs tc"}
#: the columns every table keeps, even when all their cells are empty
KEPT_COLUMNS = ("model", "accuracy")
#: the characters a rendered table line ends with when rich did not crop it
_RIGHT_EDGES = frozenset("┓┃┩│┤┘┫╇")


#: what a training table's own cells mean
TRAIN_LEGEND = (
    "training step: kernels forward+backward; (+F+B aten): ATen fallbacks in the forward and "
    "the backward (named in the notes); saved MB: what the forward keeps for the backward "
    "beyond parameters and inputs (tk: the min-cut's figure, eager: autograd's saved tensors)"
)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _ms(row: Row, variant: str, value: float | None) -> str:
    """A median over half its runs' interquartile range in % of it, on two lines (so a narrow
    column breaks between them, not inside a number): ``12.345`` / ``±4%``. The JSON keeps
    the whole spread (``Row.spreads``)."""
    if value is None:
        return "-"
    spread = row.spreads.get(variant)
    if not spread:
        return f"{value:.3f}"
    return f"{value:.3f}\n±{spread['relative_iqr'] / 2:.0%}"


def _ratio(row: Row, name: str) -> paired.PairedRatio | None:
    fields = row.paired.get(name)
    return paired.PairedRatio(**fields) if fields else None


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _paired(row: Row, name: str, label: str = "") -> str:
    """A paired ratio over its interval, ``1.83x`` / ``1.75-1.90``, with ``!`` when the interval
    is wide and ``label`` after the ratio; a bare ratio when the row has no rounds (built by
    hand)."""
    ratio = _ratio(row, name)
    if ratio is None:
        return _x(getattr(row, name))
    head = f"{ratio.median:.2f}x{'!' if ratio.noisy() else ''}{' ' + label if label else ''}"
    return f"{head}\n{ratio.low:.2f}-{ratio.high:.2f}"


def _versus(row: Row) -> str:
    return _paired(row, "vs_inductor", row.verdict or "")


def legend(rows: Sequence[Row]) -> str:
    """What the abbreviations and the two lines of a cell mean ("" when no row was timed)."""
    if not any(r.paired for r in rows):
        return ""
    peer = any("vs_inductor" in r.paired for r in rows)
    text = ("tk = torchkiln, tc = torch.compile. " if peer else "tk = torchkiln. ") + (
        "ms: median of the rounds over ± half their interquartile range. Speedups: median over "
        "rounds of eager's time / the compiler's in the same round, over its interval"
    )
    if peer:
        text += (
            "; tk vs tc: tc's time / tk's per round (>1: torchkiln faster), ahead or "
            "behind when its interval leaves out 1.0, else tie"
        )
    return text


def noisy_warning(rows: Sequence[Row]) -> str:
    """One warning naming every paired ratio whose interval is wider than NOISY_WIDTH, or ""."""
    noisy = [
        f"{r.model} {COLUMN_OF[name]} ({ratio.relative_width:.0%})"
        for r in rows
        for name in r.paired
        if (ratio := _ratio(r, name)) is not None and ratio.noisy()
    ]
    if not noisy:
        return ""
    return (
        f"warning: {len(noisy)} ratio(s) marked ! have an interval wider than "
        f"{paired.NOISY_WIDTH:.0%} of their median: {', '.join(noisy)}; the rounds disagree, "
        "so read those with their interval (more rounds, --repeat, narrow it)"
    )


def versus_summary(rows: Sequence[Row]) -> str:
    """'torchkiln vs torch.compile (...): ahead on A, behind on B, tied on T of N models; geomean
    G', or "" when torch.compile did not run."""
    compared = [r for r in rows if r.verdict is not None]
    if not compared:
        return ""
    counts = paired.count_verdicts([r.verdict for r in compared])
    confidence = min(r.paired["vs_inductor"]["confidence"] for r in compared)
    rounds = min(r.paired["vs_inductor"]["rounds"] for r in compared)
    interval = (
        f"its {paired.CONFIDENCE:.0%} interval holds 1.0"
        if confidence >= paired.CONFIDENCE
        else f"its interval holds 1.0; with {rounds} rounds that interval has only "
        f"{confidence:.0%} confidence"
    )
    return (
        f"torchkiln vs torch.compile, median of the per-round time ratios (a tie when "
        f"{interval}): ahead on {counts[paired.AHEAD]}, behind on "
        f"{counts[paired.BEHIND]}, tied on {counts[paired.TIE]} of {len(compared)} models; "
        f"geomean {_x(geometric_mean([r.vs_inductor for r in compared]))}"
    )


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


def _kernels(r: Row) -> str:
    """Kernels, as forward+backward for a training step (``12+20``)."""
    if r.task == "train" and r.kernels_fw is not None and r.kernels_bw is not None:
        return f"{r.kernels_fw}+{r.kernels_bw}"
    return _num(r.kernels, "d")


def _aten(r: Row) -> str:
    """ATen fallbacks: how many ops, ``(+2 aten)``; for a training step split by part,
    ``(+2+1 aten)`` (forward+backward)."""
    if r.task == "train" and (r.op_fallbacks_fw or r.op_fallbacks_bw):
        return f" (+{len(r.op_fallbacks_fw)}+{len(r.op_fallbacks_bw)} aten)"
    return f" (+{len(r.op_fallbacks)} aten)" if r.op_fallbacks else ""


def _mb(value: int | None) -> str:
    if value is None:
        return "-"
    mb = value / 2**20
    return f"{mb:.2f}" if mb < 10 else f"{mb:.1f}"


def _cells(r: Row) -> dict[str, str]:
    graphs = "-" if r.graphs is None else f"{r.graphs} / {r.graph_breaks} / {_kernels(r)}"
    if r.eager_fallbacks:
        graphs += f" ({r.eager_fallbacks} eager)"
    graphs += _aten(r)
    peak = [_num(v, ".1f") for v in (r.eager_peak_mem_mb, r.peak_mem_mb, r.inductor_peak_mem_mb)]
    if peak_above_eager(r):
        peak[1] += "!"
    return {
        "model": f"{r.suite}/{r.model}",
        "eager ms": _ms(r, "eager", r.eager_ms),
        "tk ms": _ms(r, "torchkiln", r.torchkiln_ms),
        "tc ms": _ms(r, "inductor", r.inductor_ms),
        "tk speedup": _paired(r, "speedup"),
        "tc speedup": _paired(r, "inductor_speedup"),
        "tk vs tc": _versus(r),
        "compile s tk / tc": f"{_num(r.compile_s, '.2f')} / {_num(r.inductor_compile_s, '.2f')}",
        "peak MB eager / tk / tc": " / ".join(peak),
        "saved MB eager / tk": f"{_mb(r.eager_saved_bytes)} / {_mb(r.saved_bytes)}",
        "graphs / breaks / kernels": graphs,
        "accuracy": r.accuracy,
    }


def _table(
    title: str,
    headers: list[str],
    cells: list[dict[str, str]],
    geomean: dict[str, str],
    minimum: dict[str, int],
) -> Table:
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


def render(
    rows: Sequence[Row], title: str = "torchkiln benchmark", width: int | None = None
) -> str:
    """The table, ``width`` columns wide (default: the terminal's, 120 when not a terminal).

    Columns empty in every row (torch.compile's when the peer did not run, peak memory on CPU)
    are left out; every column keeps the width of its longest cell while that fits (then the
    ratios and the model name, then the model name), and the others fold. Cells are described
    in the module docstring."""
    width = width or shutil.get_terminal_size((120, 24)).columns
    cells = [_cells(r) for r in rows]
    geomean = {
        "model": "geomean",
        **{
            column: _x(geometric_mean([getattr(r, name) for r in rows]))
            for name, column in COLUMN_OF.items()
        },
    }
    headers = [
        h
        for h in _cells(Row("", "", "", "", 0))
        if h in KEPT_COLUMNS
        or any(not _empty(c[h]) for c in cells)
        or not _empty(geomean.get(h, ""))
    ]
    # the width each column needs: its longest line for the model name and the ratios (which
    # must not break), its longest word for the others (rich breaks those at spaces)
    unbroken = ("model", *COLUMN_OF.values())
    minimum = {
        h: min(
            32,
            max(
                (
                    len(piece)
                    for c in [*cells, geomean]
                    for piece in (
                        c.get(h, "").split("\n") if h in unbroken else c.get(h, "").split()
                    )
                ),
                default=0,
            ),
        )
        for h in headers
    }
    ratios = {h: v for h, v in minimum.items() if h in unbroken}
    # rich crops a table whose kept widths leave too little room: keep fewer widths (every
    # column's, then the ratios' and the model's, then the model name's: what a reader looks for)
    for kept in (minimum, ratios, {k: v for k, v in minimum.items() if k == "model"}, {}):
        table = _table(title, headers, cells, geomean, kept)
        if _fits(table, width):
            break
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None)
    console.print(table)
    for line in (legend(rows), failure_summary(rows), versus_summary(rows), noisy_warning(rows)):
        if line:
            console.print(line)
    if rows and all(r.peak_mem_mb is None for r in rows):
        console.print(
            "peak memory: measured on CUDA only (torch.cuda.max_memory_allocated); '-' on CPU"
        )
    above = [r.model for r in rows if peak_above_eager(r)]
    if above:
        console.print(
            f"peak memory above eager's (marked !) on {len(above)} of {len(rows)} models: "
            + ", ".join(above)
        )
    if any(r.task == "train" for r in rows):
        console.print(TRAIN_LEGEND)
    for r in rows:
        for note in r.notes:
            console.print(f"  {r.model}: {note}")
    return buffer.getvalue()
