"""A PNG bar chart of both speedups per model (matplotlib, imported only when asked for)."""

from __future__ import annotations

from collections.abc import Sequence

from torchkiln.bench.record import Row


def _error_bars(rows: Sequence[Row], name: str) -> list[list[float]]:
    """The distance from each bar's median down and up to its interval (0 when a row has none)."""
    below, above = [], []
    for r in rows:
        stats = r.paired.get(name)
        below.append(stats["median"] - stats["low"] if stats else 0.0)
        above.append(stats["high"] - stats["median"] if stats else 0.0)
    return [below, above]


def plot_speedups(rows: Sequence[Row], path: str) -> None:
    """Write grouped bars (torchkiln, torch.compile) of speedup over eager, each with its paired
    interval; raises ImportError with a hint when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError("--plot needs matplotlib (pip install matplotlib)") from error
    names = [r.model for r in rows]
    ours = [r.speedup or 0.0 for r in rows]
    peer = [r.inductor_speedup or 0.0 for r in rows]
    positions = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 4))
    ax.bar(
        [p - 0.2 for p in positions],
        ours,
        width=0.4,
        label="torchkiln",
        yerr=_error_bars(rows, "speedup"),
        capsize=3,
    )
    ax.bar(
        [p + 0.2 for p in positions],
        peer,
        width=0.4,
        label="torch.compile",
        yerr=_error_bars(rows, "inductor_speedup"),
        capsize=3,
    )
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xticks(list(positions), names, rotation=30, ha="right")
    ax.set_ylabel("speedup over eager (x), paired per round")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
