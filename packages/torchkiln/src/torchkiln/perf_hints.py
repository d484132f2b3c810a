"""Perf hints: what in a compiled graph likely costs speed, read from what the stages recorded.

Nothing is recomputed: ATen fallbacks come from the lowering (``CompiledGraph.fallbacks``), unfused
reductions and producer/consumer pairs from the scheduler's rejected fusions
(``ScheduledGraph.fusion_log``, with ``can_fuse``'s reason), an exhausted ``max_fusions`` from the
scheduler's stop record, and a skipped CUDA graph from the report. Each hint is one line saying
what happened, why, and what it costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchkiln_loop_ir.scheduler import CYCLE_REASON

#: at most this many unfused producer/consumer pairs are listed per graph part (largest first)
MAX_VERTICAL_HINTS = 5


def graph_hints(part: str, compiled: Any) -> list[str]:
    """Hints for one compiled ATen graph (``part``: "forward" or "backward")."""
    hints = []
    for op in getattr(compiled, "fallbacks", ()) or ():
        hints.append(
            f"{part}: ATen fallback {op}: no lowering, so it runs as its eager kernel and its "
            "inputs and output go through memory instead of being fused"
        )
    records = getattr(getattr(compiled, "scheduled", None), "fusion_log", ()) or ()
    vertical = []
    apart = 0  # pairs with another kernel or extern call between them: no fusion can join them
    reduced: set[str] = set()  # reductions already hinted: one line each, not one a consumer group
    for record in records:
        if not getattr(record, "first", ""):
            hints.append(f"{part}: fusion stopped early: {record.reason}")
            continue
        if record.accepted:
            continue
        category, saved = record.score[0], record.score[1]
        if category in (2, 3) and record.reason.startswith(CYCLE_REASON):
            apart += 1
            continue
        if category == 3:
            # the scheduler retries a refused reduction with each group its consumer grows
            # into (buf1 -> buf2, then -> buf2+buf3): the first, largest-scored, says it
            if record.first in reduced:
                continue
            reduced.add(record.first)
            hints.append(
                f"{part}: unfused reduction {record.first} -> {record.second} ({saved} bytes "
                f"written and read back): {record.reason}"
            )
        elif category == 2:
            vertical.append(record)
    vertical.sort(key=lambda r: -r.score[1])
    for record in vertical[:MAX_VERTICAL_HINTS]:
        hints.append(
            f"{part}: unfused producer/consumer {record.first} -> {record.second} "
            f"({record.score[1]} bytes written and read back): {record.reason}"
        )
    if len(vertical) > MAX_VERTICAL_HINTS:
        hints.append(
            f"{part}: {len(vertical) - MAX_VERTICAL_HINTS} more unfused producer/consumer pairs "
            "(see the fusion log)"
        )
    if apart:
        hints.append(
            f"{part}: {apart} unfused producer/consumer pair(s) with another kernel or extern call "
            "between them (a matmul between a residual add and the next one, say): one kernel "
            "would have to run before and after it, so no fusion can join them (see the fusion "
            "log)"
        )
    return hints


def perf_hints(parts: Sequence[tuple[str, Any]], cudagraphs: str = "") -> list[str]:
    """Hints for every compiled graph of one captured graph (``(part, CompiledGraph)`` pairs) and
    its CUDA-graph verdict (the report's ``cudagraphs``: "" not asked, "on", else why skipped)."""
    hints = [h for part, compiled in parts for h in graph_hints(part, compiled)]
    if cudagraphs and cudagraphs != "on":
        hints.append(f"CUDA graphs were asked for but not used: {cudagraphs}")
    return hints
