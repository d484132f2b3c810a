"""Block sizes per kernel: a heuristic by default, optional timing of a few configs on CUDA."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import sympy
from torchkiln_loop_ir.backend import KernelSpec

from .options import TritonOptions


@dataclass(frozen=True)
class Config:
    """One launch configuration. ``looped`` selects the kernel shape, so it is fixed per source."""

    xblock: int
    rblock: int
    num_warps: int
    looped: bool


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _numel(ranges: Sequence[sympy.Expr]) -> int | None:
    """The product of ``ranges`` when it is a known integer, else None (symbolic sizes)."""
    total = sympy.Integer(1)
    for r in ranges:
        total = total * r
    total = sympy.sympify(total)
    return int(total) if total.is_Integer else None


def heuristic_config(spec: KernelSpec, options: TritonOptions) -> Config:
    """Pointwise: XBLOCK up to ``pointwise_xblock``; reductions: persistent when the row fits."""
    xnumel = _numel(spec.xranges)
    xcap = _next_pow2(xnumel) if xnumel is not None else None
    if not spec.rranges:
        xblock = options.pointwise_xblock if xcap is None else max(16, min(options.pointwise_xblock, xcap))
        return Config(xblock, 1, 4 if xblock >= 512 else 2, False)
    rnumel = _numel(spec.rranges)
    if rnumel is not None and rnumel <= options.persistent_rnumel:
        rblock = _next_pow2(rnumel)
        xblock = max(1, min(64, 4096 // rblock))
        looped = False
    else:
        rblock = options.looped_rblock
        xblock = max(1, min(64, 2048 // rblock))
        looped = True
    if xcap is not None:
        xblock = max(1, min(xblock, xcap))
    num_warps = 8 if rblock * xblock >= 4096 else 4 if rblock * xblock >= 512 else 2
    return Config(xblock, rblock, num_warps, looped)


def candidate_configs(base: Config) -> list[Config]:
    """A few neighbours of the heuristic choice (same kernel shape) for real autotuning."""
    out = [base]
    for xb in (base.xblock // 2, base.xblock * 2):
        if 1 <= xb <= 4096 and xb * base.rblock <= 16384:
            out.append(replace(base, xblock=xb))
    for nw in (base.num_warps // 2, base.num_warps * 2):
        if 1 <= nw <= 16:
            out.append(replace(base, num_warps=nw))
    if base.looped and base.rblock * 2 * base.xblock <= 16384:
        out.append(replace(base, rblock=base.rblock * 2))
    return out


def pick_fastest(configs: Sequence[Config], run: Callable[[Config], None]) -> Config:
    """Time ``run(config)`` for each config with triton.testing.do_bench; return the fastest."""
    from triton.testing import do_bench

    best, best_ms = configs[0], float("inf")
    failures: list[str] = []
    for cfg in configs:
        try:
            ms = do_bench(lambda cfg=cfg: run(cfg), warmup=5, rep=20)
        except Exception as e:  # noqa: BLE001 - a config can fail to compile (registers): skip it
            failures.append(f"{cfg}: {type(e).__name__}")
            ms = float("inf")
        if ms < best_ms:
            best, best_ms = cfg, ms
    return best
