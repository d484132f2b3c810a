"""The comparison peer of `python -m torchkiln bench` and `overhead`: PyTorch's own torch.compile.

It lives here, outside packages/, because nothing under packages/ may call torch.compile (it is
what torchkiln rebuilds); benchmarks may, to measure against it (docs/architecture.md). The bench
command loads this file by path (torchkiln/bench/_peer.py says where it looks).
"""

from __future__ import annotations

from typing import Any

import torch


def peer_compile(model: Any, mode: str = "default") -> Any:
    """``torch.compile(model, mode=mode)``: the peer every benchmark row is compared with."""
    return torch.compile(model, mode=mode)


def reset_peer() -> None:
    """Drop the peer's caches between models (one model's recompiles must not hit the next)."""
    torch.compiler.reset()
