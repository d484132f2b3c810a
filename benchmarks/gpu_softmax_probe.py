"""Why a softmax over long rows (GPT-2's vocabulary, 50257) stays far from the bandwidth: hand-written
Triton kernels that isolate the two suspects, each timed alone on the same bf16 tensor.

1. *The online pass is bound by instructions, not by memory.* The per-lane online update (running
   max and rescaled sum, one exp2 and about ten other instructions per value) against a plain
   row sum, a max alone, and a *grouped* update: each thread's values are first reduced in groups
   of ``G`` (``tl.reshape`` to ``[.., RBLOCK // G, G]``), so the rescale, the compare and the
   select are paid once per group, and a value costs a subtraction, an exp2 and an add.
2. *The second read of a row comes from DRAM.* A softmax reads each row twice; when the rows in
   flight (about a thousand programs resident) hold more than L2's 50 MB, the second read misses.
   Full softmax kernels launched one program per row, against *persistent* grids of ``P``
   programs each walking rows ``pid, pid + P, ...``: ``P`` rows in flight at a time.

The rows are 49152 values (a multiple of every block: no masks, aligned vector loads) so that the
compiler's own masking and aligned walk do not enter. Printed: microseconds and % of 4.3 TB/s for
the bytes a kernel must move (one read for a pass, a read and a write for a softmax).

    python3 benchmarks/gpu_softmax_probe.py [--rows 4096] [--width 49152] [--json out.json]
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import json
import sys

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
PEAK = 4.3e12


@triton.jit
def _pass(x_ptr, out_ptr, W, RBLOCK: tl.constexpr, G: tl.constexpr, KIND: tl.constexpr):
    """One read of a row: KIND 0 sum, 1 max, 2 per-lane online softmax statistics, 3 grouped."""
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * W
    rb = tl.arange(0, RBLOCK)[None, :]
    acc = tl.zeros([1, RBLOCK], tl.float32)
    m = tl.full([1, RBLOCK], float("-inf"), tl.float32)
    s = tl.zeros([1, RBLOCK], tl.float32)
    mg = tl.full([1, RBLOCK // G], float("-inf"), tl.float32)
    sg = tl.zeros([1, RBLOCK // G], tl.float32)
    for off in range(0, W, RBLOCK):
        x = tl.load(base + off + rb).to(tl.float32)
        if KIND == 0:
            acc += x
        elif KIND == 1:
            acc = tl.maximum(acc, x)
        elif KIND == 2:
            d = x - m
            e = tl.exp2(tl.maximum(-tl.abs(d) * 1.4426950408889634, float("-inf")))
            s = tl.where(d > 0, s * e + 1.0, s + e)
            m = tl.maximum(m, x, propagate_nan=tl.PropagateNan.ALL)
        else:
            x3 = tl.reshape(x, [1, RBLOCK // G, G])
            gm = tl.max(x3, 2)
            mn = tl.maximum(mg, gm, propagate_nan=tl.PropagateNan.ALL)
            ms = tl.where(mn == float("-inf"), 0.0, mn)
            e = tl.exp2((x3 - ms[:, :, None]) * 1.4426950408889634)
            sg = sg * tl.exp2((mg - ms) * 1.4426950408889634) + tl.sum(e, 2)
            mg = mn
    if KIND == 0 or KIND == 1:
        r = tl.sum(acc, 1)
    elif KIND == 2:
        mm = tl.max(m, 1)
        r = mm + tl.log(tl.sum(s * tl.exp(m - mm[:, None]), 1))
    else:
        mm = tl.max(mg, 1)
        r = mm + tl.log(tl.sum(sg * tl.exp(mg - mm[:, None]), 1))
    tl.store(out_ptr + row + tl.arange(0, 1), r)


@triton.jit
def _grouped_update(x3, mg, sg):
    """One block of the grouped online statistics: ``x3`` is [1, groups, G]; the running max
    ``mg`` and sum of exp(x - max) ``sg`` per group, updated (the new max, its rescaled sum)."""
    mn = tl.maximum(mg, tl.max(x3, 2), propagate_nan=tl.PropagateNan.ALL)
    ms = tl.where(mn == float("-inf"), 0.0, mn)
    e = tl.exp2((x3 - ms[:, :, None]) * 1.4426950408889634)
    return mn, sg * tl.exp2((mg - ms) * 1.4426950408889634) + tl.sum(e, 2)


@triton.jit
def _softmax(
    x_ptr,
    y_ptr,
    R,
    W,
    P,
    RBLOCK: tl.constexpr,
    G: tl.constexpr,
    GROUPED: tl.constexpr,
    HINTS: tl.constexpr,
):
    """A whole softmax: the online statistics, then a second read that writes the output. Program
    ``pid`` walks rows ``pid, pid + P, ...`` (``P`` the grid: one row per program when it is R)."""
    rb = tl.arange(0, RBLOCK)[None, :]
    for row in range(tl.program_id(0), R, P):
        base = row * W  # int32: main() keeps R * W below 2**31
        if GROUPED:
            mg = tl.full([1, RBLOCK // G], float("-inf"), tl.float32)
            sg = tl.zeros([1, RBLOCK // G], tl.float32)
            for off in range(0, W, RBLOCK):
                if HINTS:
                    x = tl.load(x_ptr + base + off + rb, eviction_policy="evict_last")
                else:
                    x = tl.load(x_ptr + base + off + rb)
                mg, sg = _grouped_update(tl.reshape(x.to(tl.float32), [1, RBLOCK // G, G]), mg, sg)
            mm = tl.max(mg, 1)[:, None]
            ss = tl.sum(sg * tl.exp(mg - mm), 1)[:, None]
        else:
            m = tl.full([1, RBLOCK], float("-inf"), tl.float32)
            s = tl.zeros([1, RBLOCK], tl.float32)
            for off in range(0, W, RBLOCK):
                if HINTS:
                    x = tl.load(x_ptr + base + off + rb, eviction_policy="evict_last")
                else:
                    x = tl.load(x_ptr + base + off + rb)
                x = x.to(tl.float32)
                d = x - m
                e = tl.exp2(tl.maximum(-tl.abs(d) * 1.4426950408889634, float("-inf")))
                s = tl.where(d > 0, s * e + 1.0, s + e)
                m = tl.maximum(m, x, propagate_nan=tl.PropagateNan.ALL)
            mm = tl.max(m, 1)[:, None]
            ss = tl.sum(s * tl.exp(m - mm), 1)[:, None]
        inv = 1.0 / ss
        for off in range(0, W, RBLOCK):
            if HINTS:
                x = tl.load(x_ptr + base + off + rb, eviction_policy="evict_first")
            else:
                x = tl.load(x_ptr + base + off + rb)
            y = tl.exp(x.to(tl.float32) - mm) * inv
            tl.store(y_ptr + base + off + rb, y.to(y_ptr.dtype.element_ty))


@triton.jit
def _two_pass(x_ptr, y_ptr, W, RBLOCK: tl.constexpr, WRITE: tl.constexpr, EXP2: tl.constexpr):
    """The compiler's softmax shape (one row per program, grouped online statistics loaded
    ``evict_last``, a second read ``evict_first``) with the second pass's arithmetic varied:
    WRITE 0 ``exp(x - m) / s`` (the lowering's division), 1 ``exp(x - m) * (1 / s)``, 2
    ``exp2(x * log2e - (m * log2e + log2 s))`` (one FMA and one exp2 a value), 3 ``x - m -
    log s`` (log_softmax: no exp). EXP2 computes 0 and 1's exp as ``exp2((x - m) * log2e)``
    (MUFU.EX2 without the subnormal fix-up ``tl.exp`` has)."""
    row = tl.program_id(0).to(tl.int64)
    base = row * W
    rb = tl.arange(0, RBLOCK)[None, :]
    mg = tl.full([1, RBLOCK // 8], float("-inf"), tl.float32)
    sg = tl.zeros([1, RBLOCK // 8], tl.float32)
    for off in range(0, W, RBLOCK):
        x = tl.load(x_ptr + base + off + rb, eviction_policy="evict_last")
        mg, sg = _grouped_update(tl.reshape(x.to(tl.float32), [1, RBLOCK // 8, 8]), mg, sg)
    mm = tl.max(mg, 1)[:, None]
    ss = tl.sum(sg * tl.exp(mg - mm), 1)[:, None]
    inv = 1.0 / ss
    shift = mm * 1.4426950408889634 + tl.log2(ss)
    lse = mm + tl.log(ss)
    for off in range(0, W, RBLOCK):
        x = tl.load(x_ptr + base + off + rb, eviction_policy="evict_first").to(tl.float32)
        if WRITE == 3:
            y = x - lse
        elif WRITE == 2:
            y = tl.exp2(x * 1.4426950408889634 - shift)
        else:
            if EXP2:
                e = tl.exp2((x - mm) * 1.4426950408889634)
            else:
                e = tl.exp(x - mm)
            if WRITE == 0:
                y = e / ss
            else:
                y = e * inv
        tl.store(y_ptr + base + off + rb, y.to(y_ptr.dtype.element_ty))


def second_pass_study(rows: int, report) -> None:
    """Which part of a two-read softmax misses the bandwidth: the same kernel over rows of 32768,
    49152 and 65536 (the row size in L2 between its two reads) at the launch shapes the
    heuristic picks from (RBLOCK 8192 and 16384 at 32 warps: two programs resident a SM at 32
    registers; 4096 at 16), with the second pass's arithmetic varied (``_two_pass``)."""
    writes = {
        (0, False): "exp / s",
        (0, True): "exp2 / s",
        (1, False): "exp * (1/s)",
        (1, True): "exp2 * (1/s)",
        (2, False): "exp2(fma)",
        (3, False): "log_softmax",
    }
    for width in (32768, 49152, 65536):
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16) * 3
        y = torch.empty_like(x)
        ref = torch.softmax(x.float(), -1)
        ref_log = torch.log_softmax(x.float(), -1)
        nbytes = x.numel() * x.element_size()
        for rblock, warps in ((8192, 32), (16384, 32), (4096, 16)):
            for (write, exp2), what in writes.items():
                fn = functools.partial(
                    _two_pass[(rows,)],
                    x,
                    y,
                    width,
                    RBLOCK=rblock,
                    WRITE=write,
                    EXP2=exp2,
                    num_warps=warps,
                )
                y.zero_()
                fn()
                want = ref_log if write == 3 else ref
                err = ((y.float() - want).abs() / (1 + want.abs())).max().item()
                assert err < 2e-2, (what, err)
                report(
                    f"two-pass W{width} R{rblock} w{warps} {what}",
                    _time(fn),
                    2 * nbytes,
                    width=width,
                    rblock=rblock,
                    warps=warps,
                    write=what,
                )
        eager = _time(functools.partial(torch.softmax, x, -1))
        report(f"two-pass W{width} softmax eager", eager, 2 * nbytes, width=width)


def _time(fn) -> float:
    """Median device microseconds of one call (triton.testing.do_bench, L2 cleared between)."""
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--width", type=int, default=49152)
    parser.add_argument("--json", default=None)
    parser.add_argument("--hang-s", type=float, default=170)
    parser.add_argument(
        "--second-pass", action="store_true", help="only the second-pass study (_two_pass)"
    )
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    R, W = args.rows, args.width
    assert R * W < 2**31, "the kernels index in int32"
    x = torch.randn(R, W, device="cuda", dtype=torch.bfloat16) * 3
    out = torch.empty(R, device="cuda", dtype=torch.float32)
    y = torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows: list[dict] = []

    def report(name: str, us: float, moved: int, **cfg) -> None:
        pct = 100 * moved / (us * 1e-6) / PEAK
        rows.append({"case": name, "us": round(us, 1), "pct": round(pct, 1), **cfg})
        print(f"{name:58s} {us:8.1f} us {pct:5.1f}%", flush=True)

    if args.second_pass:
        del x, out, y
        second_pass_study(R, report)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": R, "results": rows}, f, indent=1)
        return

    ref_lse = torch.logsumexp(x.float(), -1)
    for kind, name in ((0, "sum"), (1, "max"), (2, "online per lane"), (3, "online grouped")):
        for rblock, warps, g in ((2048, 8, 8), (4096, 16, 8), (4096, 8, 8), (4096, 8, 16)):
            if kind < 3 and g != 8:
                continue
            fn = functools.partial(
                _pass[(R,)], x, out, W, RBLOCK=rblock, G=g, KIND=kind, num_warps=warps
            )
            fn()
            if kind >= 2:
                err = (out - ref_lse).abs().max().item()
                assert err < 1e-2, (name, err)
            report(
                f"pass: {name} R{rblock} w{warps} G{g}",
                _time(fn),
                nbytes,
                rblock=rblock,
                warps=warps,
            )
    ref = torch.softmax(x.float(), -1)
    for grouped in (False, True):
        for rblock, warps in ((2048, 8), (4096, 16)):
            for programs in (R, 4 * sms, 3 * sms, 2 * sms, sms):
                for hints in (True, False):
                    if programs != R and not hints:
                        continue
                    fn = functools.partial(
                        _softmax[(programs,)],
                        x,
                        y,
                        R,
                        W,
                        programs,
                        RBLOCK=rblock,
                        G=8,
                        GROUPED=grouped,
                        HINTS=hints,
                        num_warps=warps,
                    )
                    y.zero_()
                    fn()
                    err = (y.float() - ref).abs().max().item()
                    assert err < 2e-2, err
                    tag = f"softmax {'grouped' if grouped else 'per lane'} R{rblock} w{warps}"
                    tag += (
                        f" P={'rows' if programs == R else programs}{'' if hints else ' no hints'}"
                    )
                    report(
                        tag, _time(fn), 2 * nbytes, rblock=rblock, warps=warps, programs=programs
                    )
    eager = _time(lambda: torch.softmax(x, -1))
    report("softmax eager", eager, 2 * nbytes)
    copy = _time(lambda: y.copy_(x))
    report("copy_", copy, 2 * nbytes)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": R, "width": W, "results": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
