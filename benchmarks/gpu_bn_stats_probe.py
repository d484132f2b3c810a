"""Where the batch-norm statistics over a channels-last image lose half the bandwidth: hand-written
Triton kernels for ``torch.var_mean(x, (0, 2, 3), correction=0)`` on an NHWC tensor, read as
``M`` rows of ``C`` channels (ResNet-50's layer1 at batch 64: 200704 rows of 256), in the two
steps codegen-triton generates (per-chunk partial sums, then their combine), with the launch
shape and the loop's form varied.

What session 24 measured (bf16): the partials kernel takes 47 us at 128 chunks (512 programs of
16 warps), 82 us at 512 chunks and 130 us at 1024 or more, whatever the values a thread, and the
float32 kernel (twice the bytes) takes 61 us: not the bandwidth. Fitted, a program costs about
6 us fixed plus 0.72 us an iteration of 64 rows: one memory latency an iteration, each thread
waiting on its one load. The variants here test both readings:

- ``SPLIT``: the chunks (64 give 256 programs of 64 columns, one wave at two programs a SM);
- ``XBLOCK`` x ``RBLOCK`` at ``num_warps``: the tile an iteration, and the programs' size
  (torch.compile's form is about 512 chunks of 64 x 8 tiles at 4 warps);
- ``PREFETCH``: the next iteration's tile loaded before this one's sums (two loads in flight a
  thread, by hand, without the cp.async pipeline ``loop_stages`` used);
- ``LANE_SHIFT``: the shift of the shifted sums per lane (the generated form: each lane's first
  value) or per column (the chunk's first row, loaded once before the loop: fewer registers).

Printed: microseconds a call (both kernels, the queue kept full), % of 4.3 TB/s for one read of
``x``, each kernel's registers, and the largest error of the mean and variance against float64.
Eager and torchkiln's own kernels (``torchkiln.compile``) are timed alongside.

    python3 benchmarks/gpu_bn_stats_probe.py [--dtype bfloat16] [--json out.json]
    TRITON_INTERPRET=1 python3 benchmarks/gpu_bn_stats_probe.py --device cpu   # a check only
"""

from __future__ import annotations

import argparse
import faulthandler
import itertools
import json

import torch
import triton
import triton.language as tl
from gpu_bandwidth import queued_ms

PEAK = 4.3e12


@triton.jit
def _partials(
    x_ptr,
    mean_ptr,
    m2_ptr,
    M,
    C: tl.constexpr,
    ROWS: tl.constexpr,
    XBLOCK: tl.constexpr,
    RBLOCK: tl.constexpr,
    PREFETCH: tl.constexpr,
    LANE_SHIFT: tl.constexpr,
):
    """Chunk ``program_id(1)`` of ``ROWS`` rows, columns ``program_id(0) * XBLOCK + ...``: the
    chunk's mean and sum of squared deviations, as shifted sums in float32."""
    cols = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    r = tl.arange(0, RBLOCK)[:, None]
    start = tl.program_id(1) * ROWS
    rows_here = tl.minimum(M - start, ROWS)
    n = rows_here.to(tl.float32)
    ptrs = x_ptr + (start + r).to(tl.int64) * C + cols
    s1 = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    s2 = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    if LANE_SHIFT:
        shift = tl.zeros([RBLOCK, XBLOCK], tl.float32)
    else:
        shift = tl.load(x_ptr + start.to(tl.int64) * C + cols).to(tl.float32)
    nxt = tl.load(ptrs, mask=r < rows_here, other=0.0)
    for off in range(0, ROWS, RBLOCK):
        mask = off + r < rows_here
        if PREFETCH:
            v = nxt.to(tl.float32)
            nxt = tl.load(ptrs + (off + RBLOCK) * C, mask=off + RBLOCK + r < rows_here, other=0.0)
        else:
            v = tl.load(ptrs + off * C, mask=mask, other=0.0).to(tl.float32)
        if LANE_SHIFT:
            shift = tl.where(off == 0, v, shift)
        d = tl.where(mask, v - shift, 0.0)
        s1 += d
        s2 += d * d
    if LANE_SHIFT:
        # each lane's own shift: the lanes' (count, mean, m2) combined, as the generated kernel does
        lanes = tl.where(r < rows_here, (rows_here - 1 - r) // RBLOCK + 1, 0).to(tl.float32)
        lane_mean = tl.where(lanes > 0, shift + s1 / tl.maximum(lanes, 1.0), 0.0)
        lane_m2 = tl.where(lanes > 0, s2 - s1 * (s1 / tl.maximum(lanes, 1.0)), 0.0)
        mean = tl.sum(lanes * lane_mean, 0) / n
        dev = lane_mean - mean[None, :]
        m2 = tl.sum(lane_m2 + lanes * dev * dev, 0)
    else:
        t1 = tl.sum(s1, 0)
        mean = tl.sum(shift, 0) + t1 / n
        m2 = tl.sum(s2, 0) - t1 * (t1 / n)
    out = tl.program_id(1) * C + tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(mean_ptr + out, mean)
    tl.store(m2_ptr + out, m2)


@triton.jit
def _combine(
    mean_ptr,
    m2_ptr,
    out_mean_ptr,
    out_var_ptr,
    M,
    C: tl.constexpr,
    SPLIT: tl.constexpr,
    ROWS: tl.constexpr,
    XBLOCK: tl.constexpr,
):
    """The chunks' (count, mean, m2) combined per column (Chan et al.), in one block of SPLIT."""
    cols = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[None, :]
    s = tl.arange(0, SPLIT)[:, None]
    # the rows past the last chunk (SPLIT is a power of two) count 0, not a negative count
    counts = tl.maximum(tl.minimum(M - s * ROWS, ROWS), 0).to(tl.float32)
    means = tl.load(mean_ptr + s * C + cols)
    m2s = tl.load(m2_ptr + s * C + cols)
    mean = tl.sum(counts * means, 0) / M
    dev = means - mean[None, :]
    m2 = tl.sum(m2s + counts * dev * dev, 0)
    c = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_mean_ptr + c, mean)
    tl.store(out_var_ptr + c, m2 / M)


def _queued_us(fn) -> float:
    """Microseconds a call with the queue kept full (gpu_bandwidth.py's ``queued_ms``)."""
    return 1000 * queued_ms(fn, calls=40)


def _variants(quick: bool) -> list[tuple[int, int, int, int, bool, bool]]:
    """(split, XBLOCK, RBLOCK, warps, prefetch, lane shift)."""
    if quick:
        # 3 chunks: the combine reads a padding row (SPLIT is a power of two)
        return [(3, 32, 8, 4, p, s) for p in (False, True) for s in (False, True)]
    out = [(128, 64, 64, 16, False, True)]  # the generated form (session 24: 47 us)
    tiles = [(64, 64, 16), (64, 8, 4), (64, 16, 4), (128, 16, 8), (256, 16, 16), (256, 8, 8)]
    for split, (xb, rb, w), prefetch in itertools.product((64, 128, 512), tiles, (False, True)):
        out.append((split, xb, rb, w, prefetch, False))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", default="cuda", help="cpu: TRITON_INTERPRET=1, a check only")
    parser.add_argument("--no-compilers", action="store_true", help="skip torchkiln's kernels")
    parser.add_argument("--hang-s", type=float, default=170)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    cuda = args.device == "cuda"
    dtype = getattr(torch, args.dtype)
    n, c, hw = (args.batch, args.channels, args.size) if cuda else (2, 64, 7)
    image = torch.randn(n, c, hw, hw, device=args.device, dtype=dtype) * 2 + 3
    image = image.to(memory_format=torch.channels_last)
    x = image.permute(0, 2, 3, 1).reshape(-1, c)  # the same memory: M rows of C channels
    assert x.data_ptr() == image.data_ptr()
    M = x.shape[0]
    ref_var, ref_mean = torch.var_mean(image.double(), (0, 2, 3), correction=0)
    moved = x.numel() * x.element_size()
    mean = torch.empty(c, device=args.device, dtype=torch.float32)
    var = torch.empty_like(mean)
    rows: list[dict] = []
    for split, xb, rb, warps, prefetch, lane in _variants(not cuda):
        if c % xb:
            continue
        chunk = -(-M // split)
        chunk = -(-chunk // rb) * rb  # whole tiles a chunk
        split_real = -(-M // chunk)
        spow = triton.next_power_of_2(split_real)
        pm = torch.zeros(spow, c, device=args.device, dtype=torch.float32)
        pm2 = torch.zeros_like(pm)
        name = (
            f"split {split_real:4d} X{xb} R{rb} w{warps} "
            f"{'prefetch' if prefetch else 'plain':8s} {'lane' if lane else 'col'} shift"
        )

        def fn(chunk=chunk, split_real=split_real, spow=spow, xb=xb, rb=rb, warps=warps,
               prefetch=prefetch, lane=lane, pm=pm, pm2=pm2):  # fmt: skip
            k1 = _partials[(c // xb, split_real)](
                x, pm, pm2, M, C=c, ROWS=chunk, XBLOCK=xb, RBLOCK=rb, PREFETCH=prefetch,
                LANE_SHIFT=lane, num_warps=warps,
            )  # fmt: skip
            k2 = _combine[(c // min(c, 32),)](
                pm, pm2, mean, var, M, C=c, SPLIT=spow, ROWS=chunk, XBLOCK=min(c, 32),
                num_warps=4,
            )  # fmt: skip
            return k1, k2

        try:
            k1, _ = fn()
            if cuda:
                torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a probe: report and go on
            print(f"{name}: {exc!r}"[:300], flush=True)
            continue
        err = max(
            (mean.double() - ref_mean).abs().max().item(),
            ((var.double() - ref_var).abs() / ref_var.abs().clamp_min(1e-6)).max().item(),
        )
        us = _queued_us(fn) if cuda else 0.0
        pct = 100 * moved / (us * 1e-6) / PEAK if us else 0.0
        regs = getattr(k1, "n_regs", None)
        print(f"{name:48s} {us:8.1f} us {pct:5.1f}%  err {err:.1e}  regs {regs}", flush=True)
        rows.append(
            {
                "split": split_real,
                "xblock": xb,
                "rblock": rb,
                "warps": warps,
                "prefetch": prefetch,
                "lane_shift": lane,
                "us": round(us, 1),
                "pct": round(pct, 1),
                "max_err": err,
                "registers": regs,
            }
        )
        assert err < 1e-3, f"{name}: error {err}"
    if not cuda:
        return
    eager = _queued_us(lambda: torch.var_mean(image, (0, 2, 3), correction=0))
    print(f"{'eager':48s} {eager:8.1f} us {100 * moved / (eager * 1e-6) / PEAK:5.1f}%")
    if not args.no_compilers:
        import torchkiln

        compiled = torchkiln.compile(lambda t: torch.var_mean(t, (0, 2, 3), correction=0))
        compiled(image)
        tk = _queued_us(lambda: compiled(image))
        print(f"{'torchkiln':48s} {tk:8.1f} us {100 * moved / (tk * 1e-6) / PEAK:5.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": [n, c, hw, hw], "dtype": args.dtype, "results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
