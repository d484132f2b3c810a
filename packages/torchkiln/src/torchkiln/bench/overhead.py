"""``python -m torchkiln overhead``: what a compiled call costs beyond eager.

1. A tiny function ``(x * y + 1).relu().sum()`` on two 8-element CPU tensors: eager vs torchkiln
   vs torch.compile, interleaved, medians of many calls, in microseconds per call.
2. Capture alone on a 20-layer MLP (Linear+ReLU, width 32, batch 1): ``capture(model,
   backend=lambda gm, ex: gm.forward)`` vs eager, steady state, and the percentage over eager.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torchkiln_dynamo_capture import capture

import torchkiln
from torchkiln.bench import timing
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
    """The measurements as a dict: µs/call per variant and differences vs eager."""
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
        eager_us = timing.median(times["eager"])
        for name, values in times.items():
            us = timing.median(values)
            result["tiny"][name] = {"us_per_call": us, "vs_eager_us": us - eager_us}
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
    eager_us, capture_us = timing.median(times["eager"]), timing.median(times["capture"])
    return {
        "eager_us": eager_us,
        "capture_us": capture_us,
        "overhead_pct": 100.0 * (capture_us / eager_us - 1.0),
    }


def render(result: dict[str, Any]) -> str:
    lines = ["per-call cost of (x * y + 1).relu().sum() on two 8-element CPU tensors:"]
    for name, values in result["tiny"].items():
        lines.append(
            f"  {name:<14} {values['us_per_call']:9.2f} us/call  "
            f"({values['vs_eager_us']:+.2f} us vs eager)"
        )
    mlp = result["capture_mlp"]
    lines.append(
        "capture overhead, 20-layer MLP (Linear+ReLU, width 32, batch 1), backend = gm.forward:"
    )
    if "error" in mlp:
        lines.append(f"  not measured: {mlp['error']}")
    else:
        lines.append(
            f"  eager {mlp['eager_us']:.2f} us/call, captured {mlp['capture_us']:.2f} us/call "
            f"({mlp['overhead_pct']:+.1f}% over eager)"
        )
    lines += [f"note: {note}" for note in result["notes"]]
    return "\n".join(lines)
