"""The comparison peer: PyTorch's own ``torch.compile`` (TorchDynamo + Inductor).

This is the one file in packages/ allowed to call torch.compile, and only to measure against it
(ARCHITECTURE.md: benchmarks may call torch.compile as the peer; nothing in the compiler does).
tests/test_layering.py names this file in its allow-list; every other file stays checked.
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
