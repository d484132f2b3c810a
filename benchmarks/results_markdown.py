"""Markdown tables of ``python -m torchkiln bench --json`` results, for a results folder's README
and a closing note: one table per file, the paired "tk vs tc" ratio with its 90% interval, and
compile time and peak memory beside each model.

    python benchmarks/results_markdown.py benchmarks/results/<folder>/call*/gpu-*.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _mb(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def _x(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _versus(row: dict[str, Any]) -> str:
    paired = row.get("paired", {}).get("vs_inductor") or {}
    ratio = paired.get("median", row.get("vs_inductor"))
    if ratio is None:
        return ""
    verdict = row.get("verdict", "")
    text = f"{ratio:.2f}x {verdict}"
    if verdict == "ahead":
        text = f"**{text}**"
    if "low" in paired:
        text += f" ({paired['low']:.2f}-{paired['high']:.2f})"
    return text


def table(path: Path) -> str:
    rows = json.loads(path.read_text())["rows"]
    train = any(r.get("task") == "train" for r in rows)
    lines = [
        f"**{path.parent.name}/{path.name}**",
        "",
        "| model (batch) | eager ms | tk ms | tc ms | tk | tc | tk vs tc (90%) "
        "| compile s tk / tc | peak MB eager / tk / tc |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    logs: dict[str, list[float]] = {"speedup": [], "inductor_speedup": [], "vs_inductor": []}
    for r in rows:
        for key, values in logs.items():
            if r.get(key):
                values.append(math.log(r[key]))
        lines.append(
            f"| {r['model']} ({r['batch']}) | {_ms(r.get('eager_ms'))} "
            f"| {_ms(r.get('torchkiln_ms'))} | {_ms(r.get('inductor_ms'))} "
            f"| {_x(r.get('speedup'))} | {_x(r.get('inductor_speedup'))} | {_versus(r)} "
            f"| {_s(r.get('compile_s'))} / {_s(r.get('inductor_compile_s'))} "
            f"| {_mb(r.get('eager_peak_mem_mb'))} / {_mb(r.get('peak_mem_mb'))} "
            f"/ {_mb(r.get('inductor_peak_mem_mb'))} |"
        )

    def geomean(key: str) -> str:
        values = logs[key]
        return f"{math.exp(sum(values) / len(values)):.2f}x" if values else ""

    lines.append(
        f"| geomean | | | | {geomean('speedup')} | {geomean('inductor_speedup')} "
        f"| {geomean('vs_inductor')} | | |"
    )
    if train:
        lines.append("")
        lines.append("(a training step: forward, loss, backward and the optimizer's step)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    print("\n\n".join(table(p) for p in args.files))


if __name__ == "__main__":
    main()
