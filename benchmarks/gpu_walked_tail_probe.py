"""Where the softmax over rows of 50257 (GPT-2's vocabulary) loses its last third of the
bandwidth: hand-written copies of the kernel codegen-triton generates for it (the aligned walk
from 16-byte boundaries, the grouped online max and sum loaded ``evict_last``, a second read
``evict_first`` that writes the row), with two changes tried, alone and together:

- *A narrow last block, loaded first.* A row of 50257 walked in blocks of 8192 takes seven
  blocks a pass, the last holding 1112 positions of 8192; rows of 49152 (six) ran at 85%, rows
  of 50256 at 72% (session 21): each iteration waits for its own loads, so an iteration costs
  about the same however empty. Here the main loop stops after the sixth block and the row's end
  is one block of ``TAIL`` (2048: two values a thread at 32 warps) loaded *before* the main loop
  and reduced after it, so its loads are in flight while the main blocks are; the second pass
  writes it from the registers it is still in (no second read of it).
- *A reciprocal.* The second pass's ``exp(x - m) / s`` as ``exp(x - m) * (1 / s)``.

Printed: microseconds a call with the queue kept full and % of 4.3 TB/s for one read and one
write of the tensor, the registers a thread and the spills, and the largest error against
``torch.softmax`` in float32.

    python3 benchmarks/gpu_walked_tail_probe.py [--rows 4096] [--width 50257] [--json out.json]
"""

from __future__ import annotations

import argparse
import faulthandler
import json

import torch
import triton
import triton.language as tl

PEAK = 4.3e12
LOG2E = 1.4426950408889634


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _grouped(x, m, s, RBLOCK: tl.constexpr):
    """The online update of ``m`` and ``s`` ([1, RBLOCK // 8]) by a block ``x`` ([1, RBLOCK],
    -inf where masked), as the generated kernel writes it."""
    v = tl.reshape(x, [1, RBLOCK // 8, 8])
    g = tl.maximum(m, tl.reduce(v, 2, _max_combine), propagate_nan=tl.PropagateNan.ALL)
    b = tl.where(g == float("-inf"), 0.0, g)
    s = s * tl.exp2((m - b) * 1.4426950408889634) + tl.sum(
        tl.exp2((v - b[:, :, None]) * 1.4426950408889634), 2
    )
    return g, s


@triton.jit
def _walked_softmax(
    x_ptr,
    y_ptr,
    rnumel,
    W: tl.constexpr,
    RBLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    RECIP: tl.constexpr,
):
    """One row a program. TAIL 0: the generated kernel's three loops a pass (first block, inside
    blocks, last block(s)); else the first two only, up to ``W // RBLOCK * RBLOCK``, and the rest
    of the row one block of TAIL lanes loaded before them."""
    row = tl.program_id(0)
    rbase = tl.arange(0, RBLOCK)[None, :]
    rrow = (W * row) // 8 * 8
    rshift = W * row - rrow
    inner = W // RBLOCK * RBLOCK
    m = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
    s = tl.zeros([1, RBLOCK // 8], tl.float32)
    if TAIL:
        tpos = inner + tl.arange(0, TAIL)[None, :]
        tidx = tpos - rshift
        tmask = tidx < rnumel
        tload = tpos < (rshift + W + 7) // 8 * 8
        xt = tl.load(x_ptr + (rrow + tpos), tload, other=0, eviction_policy="evict_last")
    for roffset in range(0, tl.minimum(rnumel, RBLOCK), RBLOCK):  # the first block
        rpos = roffset + rbase
        rindex = rpos - rshift
        rmask = (rindex >= 0) & (rindex < rnumel)
        x = tl.load(x_ptr + (rrow + rpos), eviction_policy="evict_last").to(tl.float32)
        m, s = _grouped(tl.where(rmask, x, float("-inf")), m, s, RBLOCK)
    for roffset in range(RBLOCK, inner, RBLOCK):  # inside the row
        rpos = roffset + rbase
        x = tl.load(x_ptr + (rrow + rpos), eviction_policy="evict_last").to(tl.float32)
        m, s = _grouped(x, m, s, RBLOCK)
    if not TAIL:
        for roffset in range(tl.maximum(inner, RBLOCK), rnumel + 7, RBLOCK):  # the last block
            rpos = roffset + rbase
            rindex = rpos - rshift
            rmask = (rindex >= 0) & (rindex < rnumel)
            rload = rpos < (rshift + W + 7) // 8 * 8
            x = tl.load(x_ptr + (rrow + rpos), rload, other=0, eviction_policy="evict_last")
            m, s = _grouped(tl.where(rmask, x.to(tl.float32), float("-inf")), m, s, RBLOCK)
    mm = tl.reduce(m, 1, _max_combine)[:, None]
    if TAIL:
        xtf = tl.where(tmask, xt.to(tl.float32), float("-inf"))
        mt = tl.reduce(xtf, 1, _max_combine)[:, None]
        mm = tl.maximum(mm, mt)
        ss = tl.sum(s * tl.exp(m - mm), 1)[:, None] + tl.sum(tl.exp(xtf - mm), 1)[:, None]
    else:
        ss = tl.sum(s * tl.exp(m - mm), 1)[:, None]
    inv = 1.0 / ss
    if TAIL:
        et = tl.exp(xt.to(tl.float32) - mm)
        yt = (et * inv if RECIP else et / ss).to(y_ptr.dtype.element_ty)
        tstore = tpos < (rshift + W) // 8 * 8
        tl.store(y_ptr + (rrow + tpos), yt, tstore)
        tl.store(y_ptr + (rrow + tpos), yt, tmask & ~tstore)
    for roffset in range(0, tl.minimum(rnumel, RBLOCK), RBLOCK):
        rpos = roffset + rbase
        rindex = rpos - rshift
        rmask = (rindex >= 0) & (rindex < rnumel)
        rstore = rpos >= 8
        x = tl.load(x_ptr + (rrow + rpos), eviction_policy="evict_first").to(tl.float32)
        e = tl.exp(x - mm)
        y = (e * inv if RECIP else e / ss).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + (rrow + rpos), y, rstore)
        tl.store(y_ptr + (rrow + rpos), y, rmask & ~rstore)
    for roffset in range(RBLOCK, inner, RBLOCK):
        rpos = roffset + rbase
        x = tl.load(x_ptr + (rrow + rpos), eviction_policy="evict_first").to(tl.float32)
        e = tl.exp(x - mm)
        y = (e * inv if RECIP else e / ss).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + (rrow + rpos), y)
    if not TAIL:
        for roffset in range(tl.maximum(inner, RBLOCK), rnumel + 7, RBLOCK):
            rpos = roffset + rbase
            rindex = rpos - rshift
            rmask = (rindex >= 0) & (rindex < rnumel)
            rload = rpos < (rshift + W + 7) // 8 * 8
            rstore = rpos < (rshift + W) // 8 * 8
            x = tl.load(x_ptr + (rrow + rpos), rload, other=0, eviction_policy="evict_first")
            e = tl.exp(x.to(tl.float32) - mm)
            y = (e * inv if RECIP else e / ss).to(y_ptr.dtype.element_ty)
            tl.store(y_ptr + (rrow + rpos), y, rstore)
            tl.store(y_ptr + (rrow + rpos), y, rmask & ~rstore)


def _queued_us(fn, calls: int = 40) -> float:
    """Microseconds a call, ``calls`` launches back to back between two events (median of 5)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--width", type=int, default=50257)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", default="cuda", help="cpu: TRITON_INTERPRET=1, a check only")
    parser.add_argument("--hang-s", type=float, default=170)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    R, W = args.rows, args.width
    dtype = getattr(torch, args.dtype)
    assert R * W < 2**31, "the kernels index in int32"
    x = torch.randn(R, W, device=args.device, dtype=dtype) * 3
    y = torch.empty_like(x)
    ref = torch.softmax(x.float(), -1)
    moved = 2 * x.numel() * x.element_size()
    rows: list[dict] = []
    variants = []
    for rblock in (8192, 16384):
        for tail in (0, 2048):
            for recip in (False, True):
                for maxnreg in (32, 0):
                    variants.append((rblock, tail, recip, maxnreg))
    for rblock, tail, recip, maxnreg in variants:
        if tail and (W - W // rblock * rblock) + 7 > tail:
            continue
        opts = {"num_warps": 32, **({"maxnreg": maxnreg} if maxnreg else {})}
        launch = _walked_softmax[(R,)]

        def fn(launch=launch, rblock=rblock, tail=tail, recip=recip, opts=opts):
            return launch(x, y, W, W=W, RBLOCK=rblock, TAIL=tail, RECIP=recip, **opts)

        y.zero_()
        name = f"R{rblock} tail {tail} {'recip' if recip else 'div'} maxnreg {maxnreg or '-'}"
        try:
            kernel = fn()
            if args.device == "cuda":
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a probe: report and go on
            print(f"{name}: {exc!r}"[:300])
            continue
        err = (y.float() - ref).abs().max().item()
        regs, spills = getattr(kernel, "n_regs", None), getattr(kernel, "n_spills", None)
        us = _queued_us(fn) if args.device == "cuda" else 0.0
        pct = 100 * moved / (us * 1e-6) / PEAK if us else 0.0
        print(
            f"{name:40s} {us:8.1f} us {pct:5.1f}%  err {err:.2e}  regs {regs} spills {spills}",
            flush=True,
        )
        rows.append(
            {
                "rblock": rblock,
                "tail": tail,
                "recip": recip,
                "maxnreg": maxnreg,
                "us": round(us, 1),
                "pct": round(pct, 1),
                "max_err": err,
                "registers": regs,
                "spills": spills,
            }
        )
    if args.device != "cuda":
        return
    eager = _queued_us(lambda: torch.softmax(x, -1))
    print(f"{'eager':40s} {eager:8.1f} us {100 * moved / (eager * 1e-6) / PEAK:5.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": R, "width": W, "dtype": args.dtype, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
