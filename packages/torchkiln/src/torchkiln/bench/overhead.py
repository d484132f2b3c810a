"""``python -m torchkiln overhead``: what a compiled call costs beyond eager.

1. A tiny function ``(x * y + 1).relu().sum()`` on two 8-element CPU tensors: eager vs torchkiln
   vs torch.compile, interleaved, in microseconds per call; each variant's cost over eager is the
   median of its per-round differences with eager, with their 90% interval (``bench/paired.py``).
2. Capture alone on a 20-layer MLP (Linear+ReLU, width 32, batch 1): ``capture(model,
   backend=lambda gm, ex: gm.forward)`` vs eager, steady state, and the percentage over eager:
   the median of the per-round ratios captured / eager, with its interval.

Pairing by round, as the main bench does, cancels what a shared machine does to a whole round.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torchkiln_dynamo_capture import capture

import torchkiln
from torchkiln.bench import paired, timing
from torchkiln.bench._peer import peer_compile, reset_peer
from torchkiln.pipeline import one_line


def tiny(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y + 1).relu().sum()


def _per_call_us(calls: int) -> Callable[[Callable[[], Any]], float]:
    """A measure that times ``calls`` back-to-back calls and returns microseconds per call."""

    def measure(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) * 1e6 / calls

    return measure


def run_overhead(repeat: int = 30, calls: int = 200, peer: bool = True) -> dict[str, Any]:
    """The measurements as a dict: µs/call per variant and paired costs over eager."""
    torch.manual_seed(0)
    x, y = torch.randn(8), torch.randn(8)
    result: dict[str, Any] = {"tiny": {}, "capture_mlp": {}, "notes": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torchkiln.compile(tiny)
        compiled(x, y)
        fns: dict[str, Callable[[], Any]] = {
            "eager": lambda: tiny(x, y),
            "torchkiln": lambda: compiled(x, y),
        }
        if peer:
            try:
                peer_fn = peer_compile(tiny)
                peer_fn(x, y)
                fns["torch.compile"] = lambda: peer_fn(x, y)
            except Exception as error:  # noqa: BLE001
                result["notes"].append(f"torch.compile failed: {one_line(error)}")
        times = timing.interleaved(fns, repeat=repeat, warmup=2, measure=_per_call_us(calls))
        result["tiny"] = summarise_tiny(times)
        reset_peer()

        result["capture_mlp"] = _capture_overhead(repeat, calls)
    result["notes"] += sorted({str(w.message) for w in caught if "torchkiln" in str(w.message)})
    return result


def _capture_overhead(repeat: int, calls: int) -> dict[str, Any]:
    layers: list[torch.nn.Module] = []
    for _ in range(20):
        layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(1, 32)
    try:
        captured = capture(model, backend=lambda gm, ex: gm.forward)
        with torch.no_grad():
            captured(x)
    except Exception as error:  # noqa: BLE001
        return {"error": f"capture failed: {one_line(error)}"}
    with torch.no_grad():
        times = timing.interleaved(
            {"eager": lambda: model(x), "capture": lambda: captured(x)},
            repeat=repeat,
            warmup=2,
            measure=_per_call_us(calls // 4 or 1),
        )
    return summarise_capture(times)


def summarise_tiny(times_us: dict[str, list[float]]) -> dict[str, dict[str, Any]]:
    """Per variant: its median µs/call and its cost over eager, the median of the per-round
    differences ``variant[r] - eager[r]`` with their interval (``vs_eager_us_low``/``_high``,
    ``confidence``)."""
    summary: dict[str, dict[str, Any]] = {}
    for name, values in times_us.items():
        over = paired.paired_difference(values, times_us["eager"])
        summary[name] = {
            "us_per_call": timing.median(values),
            "vs_eager_us": over.median,
            "vs_eager_us_low": over.low,
            "vs_eager_us_high": over.high,
            "confidence": over.confidence,
            "rounds": over.rounds,
        }
    return summary


def summarise_capture(times_us: dict[str, list[float]]) -> dict[str, Any]:
    """Capture's cost over eager as a percentage: 100 * (the median of the per-round ratios
    ``capture[r] / eager[r]`` - 1), with the ratios' interval as percentages."""
    ratio = paired.paired_ratio(times_us["capture"], times_us["eager"])
    return {
        "eager_us": timing.median(times_us["eager"]),
        "capture_us": timing.median(times_us["capture"]),
        "overhead_pct": 100.0 * (ratio.median - 1.0),
        "overhead_pct_low": 100.0 * (ratio.low - 1.0),
        "overhead_pct_high": 100.0 * (ratio.high - 1.0),
        "confidence": ratio.confidence,
        "rounds": ratio.rounds,
    }


def render(result: dict[str, Any]) -> str:
    lines = ["per-call cost of (x * y + 1).relu().sum() on two 8-element CPU tensors:"]
    for name, values in result["tiny"].items():
        over = f"{values['vs_eager_us']:+.2f} us vs eager"
        if name != "eager":
            over += (
                f", {values['confidence']:.0%} interval {values['vs_eager_us_low']:+.2f}.."
                f"{values['vs_eager_us_high']:+.2f}"
            )
        lines.append(f"  {name:<14} {values['us_per_call']:9.2f} us/call  ({over})")
    mlp = result["capture_mlp"]
    lines.append(
        "capture overhead, 20-layer MLP (Linear+ReLU, width 32, batch 1), backend = gm.forward:"
    )
    if "error" in mlp:
        lines.append(f"  not measured: {mlp['error']}")
    else:
        lines.append(
            f"  eager {mlp['eager_us']:.2f} us/call, captured {mlp['capture_us']:.2f} us/call "
            f"({mlp['overhead_pct']:+.1f}% over eager, {mlp['confidence']:.0%} interval "
            f"{mlp['overhead_pct_low']:+.1f}..{mlp['overhead_pct_high']:+.1f}%)"
        )
    lines.append(
        "(costs over eager are medians of per-round differences or ratios, each round timing "
        "every variant once)"
    )
    lines += [f"note: {note}" for note in result["notes"]]
    return "\n".join(lines)
