"""Block sizes per kernel: a heuristic by default, optional timing of a few configs on CUDA."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import sympy
import torch
from torchkiln_loop_ir.backend import KernelSpec

from ._layout import BlockLayout, choose_layout
from ._split import splittable
from .options import TritonOptions


@dataclass(frozen=True)
class Config:
    """One launch configuration. ``looped`` selects the kernel shape, so it is fixed per source,
    as are ``transposed`` (the block layout of a reduction, ``_layout.py``) and ``split`` (at
    most this many r chunks reduced by separate programs into partials, then finished by a
    second kernel, ``_split.py``; 0 means no split). ``split`` itself is a launch parameter
    (the chunk count is worked out per call); ``partials`` (the partial buffers' dtypes) come
    from the generated source."""

    xblock: int
    rblock: int
    num_warps: int
    looped: bool
    transposed: bool = False
    split: int = 0
    partials: tuple[torch.dtype, ...] = ()


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _numel(ranges: Sequence[sympy.Expr]) -> int | None:
    """The product of ``ranges`` when it is a known integer, else None (symbolic sizes)."""
    total = sympy.Integer(1)
    for r in ranges:
        total = total * r
    total = sympy.sympify(total)
    return int(total) if total.is_Integer else None


def heuristic_config(spec: KernelSpec, options: TritonOptions,
                     layout: BlockLayout | None = None) -> Config:
    """Pointwise: XBLOCK up to ``pointwise_xblock``; reductions: persistent when the row fits.
    ``layout`` is the reduction's block layout (None: ``choose_layout`` decides)."""
    xnumel = _numel(spec.xranges)
    xcap = _next_pow2(xnumel) if xnumel is not None else None
    if not spec.rranges:
        xblock = options.pointwise_xblock if xcap is None else max(16, min(options.pointwise_xblock, xcap))
        return Config(xblock, 1, 4 if xblock >= 512 else 2, False)
    rnumel = _numel(spec.rranges)
    layout = layout or choose_layout(spec)
    if layout.transposed:
        return _transposed_config(spec, options, xcap, rnumel)
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
    split = split_chunks(spec, options, xblock, rblock) if looped else 0
    return Config(xblock, rblock, num_warps, looped, split=split)


def _transposed_config(spec: KernelSpec, options: TritonOptions, xcap: int | None,
                       rnumel: int | None) -> Config:
    """Blocks of an outer reduction (r on axis 0, x on axis 1, memory contiguous along x): a
    wide XBLOCK (64 contiguous elements is a 128-byte line of bfloat16, two of float32) and a
    short RBLOCK, so the accumulator tile stays small; persistent only when the whole column fits
    beside that many x (rnumel <= 4096 / 32), else looped over r. A kernel of few x columns and
    many r rows is split over r (``split_chunks``) so enough programs run."""
    xblock = 64 if xcap is None else max(1, min(64, xcap))
    if rnumel is not None and _next_pow2(rnumel) * max(xblock, 32) <= 4096 \
            and rnumel <= options.persistent_rnumel:
        rblock = _next_pow2(rnumel)
        looped = False
    else:
        rblock = max(1, min(options.transposed_rblock, 2048 // xblock))
        looped = True
    num_warps = 8 if rblock * xblock >= 4096 else 4 if rblock * xblock >= 512 else 2
    split = split_chunks(spec, options, xblock, rblock) if looped else 0
    return Config(xblock, rblock, num_warps, looped, transposed=True, split=split)


def split_chunks(spec: KernelSpec, options: TritonOptions, xblock: int, rblock: int) -> int:
    """How many r chunks to split a looped reduction into (0: none): when the x blocks alone
    give fewer than a quarter of ``options.split_programs`` programs (about two per SM of an
    H200: a split costs a second launch, worth it only below that), enough chunks that
    ``options.split_programs`` programs run, each chunk still
    at least ``options.split_min_rchunk`` rows (the partials then cost a small fraction of
    the input's traffic), at most ``options.split_max_chunks``. Only kernels of known sizes whose
    reductions can be combined from partials (``_split.splittable``)."""
    xnumel, rnumel = _numel(spec.xranges), _numel(spec.rranges)
    if options.split_max_chunks < 2 or xnumel is None or rnumel is None:
        return 0
    xprograms = -(-xnumel // xblock)
    if xprograms * 4 > options.split_programs:
        return 0
    chunks = min(options.split_max_chunks, -(-options.split_programs // xprograms),
                 rnumel // max(options.split_min_rchunk, rblock))
    if chunks < 2 or not splittable(spec):
        return 0
    return chunks


def candidate_configs(base: Config) -> list[Config]:
    """A few neighbours of the heuristic choice (same kernel shape) for real autotuning. An
    outer reduction (transposed) also tries a shorter RBLOCK (a smaller accumulator tile at the
    same coalesced XBLOCK); a split one, half and twice as many chunks (the chunk count is a
    launch parameter: the same source)."""
    out = [base]
    for xb in (base.xblock // 2, base.xblock * 2):
        if 1 <= xb <= 4096 and xb * base.rblock <= 16384:
            out.append(replace(base, xblock=xb))
    for nw in (base.num_warps // 2, base.num_warps * 2):
        if 1 <= nw <= 16:
            out.append(replace(base, num_warps=nw))
    if base.looped and base.rblock * 2 * base.xblock <= 16384:
        out.append(replace(base, rblock=base.rblock * 2))
    if base.transposed and base.looped and base.rblock >= 2:
        out.append(replace(base, rblock=base.rblock // 2))
    if base.split:
        out += [replace(base, split=n) for n in (base.split // 2, base.split * 2) if n >= 2]
    return list(dict.fromkeys(out))


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
