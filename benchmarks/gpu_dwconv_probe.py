"""Depthwise 7x7s on ConvNeXt-tiny's shapes: Triton kernels against cuDNN's ``F.conv2d`` on the
same tensors, channels-last, bf16 and float32.

Why: on an H100 (session 45, ``gpu_kernel_profile.py``, bf16 inference at batch 64) cuDNN's
depthwise 7x7 (``conv2d_c1_k1_nhwc_specialized``, 18 launches) takes 1.25 ms of the model's
4.18 ms of kernel time, about 7.6 times the time its bytes need. loop-ir's direct convolution
(``LoopIROptions.direct_convolution_taps``: one output element a lane) was slower than cuDNN
in bf16 (session 16: 0.52-0.65x on every 7x7) and faster in float32 (1.40-1.93x).

Variants (``--variants``):

- ``tiled``: a kernel written here over [BLOCK_P output pixels x BLOCK_C channels], summing
  each output's taps (a pixel's coordinates, bounds and row address once per tap for all its
  channels; the channels contiguous). Session 45: slower than cuDNN in bf16 (it loads and
  converts each input value once per tap, 49 times).
- ``strip``: codegen-triton's kernel (``_depthwise.py``, what loop-ir's
  ``depthwise_convolutions`` runs on CUDA): strips of output pixels along a row, each input
  pixel a kernel row reads loaded once; swept over ``STRIP_CONFIGS``.
- ``shipped``: the same at the configuration it picks (``launch_config``).
- ``unrolled``: the strip kernel with its kernel rows unrolled in the text (as session 46's GPU
  runs had it; the shipped form is a loop, which compiles about 16 times faster).

Printed per shape and dtype: cuDNN (convolution with its bias), each variant's best
configuration and the spread of the others, each in microseconds and in % of the bandwidth for
the bytes a convolution must move (input, output, weights once); the largest difference from a
float64 reference in the output's magnitude. ``--check`` runs small shapes only, for
correctness (with ``TRITON_INTERPRET=1`` on a CPU), and fails past one rounding of the output.

    python3 benchmarks/gpu_dwconv_probe.py [--dtypes bfloat16,float32] [--variants strip,shipped]
        [--batch 64] [--json F]
"""

from __future__ import annotations

import argparse
import faulthandler
import json

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from gpu_epilogue_check import events_us
from torchkiln_codegen_triton import _depthwise as depthwise
from torchkiln_codegen_triton._depthwise import conv_depthwise

#: ConvNeXt-tiny's depthwise 7x7s: (channels, height = width), 3, 3, 9 and 3 blocks
CONVNEXT_TINY = ((96, 56), (192, 28), (384, 14), (768, 7))
#: (BLOCK_P, BLOCK_C, num_warps): eight shapes of a tile of 2K-8K values
CONFIGS = (
    (32, 64, 4),
    (64, 64, 4),
    (64, 32, 4),
    (128, 32, 4),
    (16, 128, 4),
    (32, 128, 4),
    (64, 128, 8),
    (128, 64, 8),
)


@triton.jit
def dwconv_nhwc(
    x_ptr, w_ptr, b_ptr, y_ptr, P, H, W, C, OH, OW,
    KH: tl.constexpr, KW: tl.constexpr, PAD: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    pmask = p < P
    cmask = c < C
    ow = p % OW
    t = p // OW
    oh = t % OH
    n = t // OH
    acc = tl.zeros([BLOCK_P, BLOCK_C], tl.float32)
    for i in tl.static_range(KH):
        h = oh - PAD + i
        hok = pmask & (h >= 0) & (h < H)
        for j in tl.static_range(KW):
            w = ow - PAD + j
            ok = hok & (w >= 0) & (w < W)
            row = ((n * H + h) * W + w).to(tl.int64) * C
            v = tl.load(
                x_ptr + row[:, None] + c[None, :], mask=ok[:, None] & cmask[None, :], other=0.0
            )
            tap = tl.load(w_ptr + (i * KW + j) * C + c, mask=cmask, other=0.0)
            acc += v.to(tl.float32) * tap.to(tl.float32)[None, :]
    acc += tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)[None, :]
    out = y_ptr + (p.to(tl.int64) * C)[:, None] + c[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=pmask[:, None] & cmask[None, :])


def tiled(
    x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, pad: int, config
) -> torch.Tensor:
    """The depthwise convolution of channels-last ``x`` (N, C, H, W) with ``taps`` (KH*KW, C),
    stride 1, ``pad`` on each side; channels-last output."""
    block_p, block_c, warps = config
    n, c, h, w = x.shape
    k = int(round(taps.shape[0] ** 0.5))
    oh, ow = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    y = torch.empty((n, c, oh, ow), dtype=x.dtype, device=x.device).to(
        memory_format=torch.channels_last
    )
    p = n * oh * ow
    grid = (triton.cdiv(p, block_p), triton.cdiv(c, block_c))
    dwconv_nhwc[grid](
        x, taps, bias, y, p, h, w, c, oh, ow,
        KH=k, KW=k, PAD=pad, BLOCK_P=block_p, BLOCK_C=block_c, num_warps=warps,
    )  # fmt: skip
    return y


#: (BLOCK_R strips, BLOCK_C channels, num_warps, WS output pixels a strip) for codegen-triton's
#: strip kernel (``_depthwise.py``), beside the configuration it picks (``launch_config``)
STRIP_CONFIGS = (
    (32, 32, 4, 7),
    (16, 64, 4, 7),
    (64, 32, 4, 7),
    (16, 32, 4, 7),
    (32, 16, 2, 7),
    (32, 32, 4, 4),
)


def strip(x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, pad: int, config):
    """``tiled``'s convolution by codegen-triton's strip kernel; ``config`` is (BLOCK_R,
    BLOCK_C, warps, WS), or None for the one it picks."""
    k = int(round(taps.shape[0] ** 0.5))
    return conv_depthwise(x, taps.reshape(1, k, k, -1), bias, (pad, pad), config)


def unrolled(x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, pad: int, config):
    """``strip`` with the kernel rows unrolled in the text (``_depthwise.UNROLL_ROWS``), at
    the configuration given."""
    shipped = depthwise.UNROLL_ROWS
    depthwise.UNROLL_ROWS = True
    try:
        return strip(x, taps, bias, pad, config)
    finally:
        depthwise.UNROLL_ROWS = shipped


#: the generated kernels timed against cuDNN: name -> (function, its configurations)
VARIANTS = {
    "tiled": (tiled, CONFIGS),
    "strip": (strip, STRIP_CONFIGS),
    "shipped": (strip, (None,)),
    "unrolled": (unrolled, STRIP_CONFIGS),
}
#: small configurations for ``--check``
CHECK_VARIANTS = {
    "tiled": (tiled, ((16, 32, 4), (32, 64, 4))),
    "strip": (strip, ((16, 32, 4, 7), (16, 32, 4, 4))),
    "shipped": (strip, (None,)),
    "unrolled": (unrolled, ((16, 32, 4, 7),)),
}


def case(batch: int, channels: int, size: int, dtype: torch.dtype, device, timed: bool, variants):
    torch.manual_seed(0)
    k, pad = 7, 3
    x = torch.randn(batch, channels, size, size, device=device).to(
        dtype=dtype, memory_format=torch.channels_last
    )
    weight = (torch.randn(channels, 1, k, k, device=device) / k).to(dtype)
    bias = torch.randn(channels, device=device).to(dtype)
    taps = weight.reshape(channels, k * k).t().contiguous()  # (taps, C)
    ref = F.conv2d(x.double(), weight.double(), bias.double(), padding=pad, groups=channels)
    scale = ref.abs().max().item()
    row = {"batch": batch, "channels": channels, "size": size, "dtype": str(dtype)[6:]}
    nbytes = 2 * x.numel() * x.element_size() + taps.numel() * taps.element_size()
    row["bytes"] = nbytes
    if timed:
        row["cudnn_us"] = events_us(lambda: F.conv2d(x, weight, bias, padding=pad, groups=channels))
        cudnn = F.conv2d(x, weight, bias, padding=pad, groups=channels)
        row["cudnn_err"] = (cudnn.double() - ref).abs().max().item() / scale
    for name, (fn, configs) in variants.items():
        results = {}
        for config in configs:
            y = fn(x, taps, bias, pad, config)
            err = (y.double() - ref).abs().max().item() / scale
            us = events_us(lambda f=fn, cf=config: f(x, taps, bias, pad, cf)) if timed else 0.0
            results[config] = (us, err)
        if not timed:
            row[f"{name}_errors"] = {str(cf): err for cf, (_, err) in results.items()}
            continue
        best = min(results, key=lambda cf: results[cf][0])
        times = sorted(us for us, _ in results.values())
        row[name] = {
            "best": list(best) if best else "its pick",
            "us": results[best][0],
            "err": max(err for _, err in results.values()),
            "spread_us": [times[0], times[len(times) // 2], times[-1]],
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument(
        "--variants", default="tiled,strip,shipped", help="which of VARIANTS to time"
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--peak-gbs", type=float, default=3350.0, help="the card's bandwidth")
    parser.add_argument("--check", action="store_true", help="small shapes, correctness only")
    parser.add_argument("--json", default="")
    parser.add_argument("--hang-s", type=float, default=200)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    rows = []
    if args.check:
        for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
            for channels, size in ((40, 9), (24, 5), (8, 7)):
                row = case(2, channels, size, dtype, "cpu", False, CHECK_VARIANTS)
                print(row, flush=True)
                # one rounding of the output: half a bf16 ulp on a GPU, a whole one under the
                # interpreter (it truncates float32 to bfloat16)
                bound = 2.0**-7 if dtype == torch.bfloat16 else 1e-5
                for name in CHECK_VARIANTS:
                    assert max(row[f"{name}_errors"].values()) <= bound, (name, row)
                rows.append(row)
    else:
        print(
            torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__
        )
        variants = {name: VARIANTS[name] for name in args.variants.split(",")}
        for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
            total = {"cudnn": 0.0} | {name: 0.0 for name in variants}
            for channels, size in CONVNEXT_TINY:
                r = case(args.batch, channels, size, dtype, "cuda", True, variants)
                rows.append(r)
                floor = r["bytes"] / (args.peak_gbs * 1e3)
                total["cudnn"] += r["cudnn_us"]
                text = (
                    f"{r['dtype']:8s} C {channels:3d} {size:2d}x{size:<2d}: cuDNN "
                    f"{r['cudnn_us']:7.1f} us ({floor / r['cudnn_us']:4.0%}, err {r['cudnn_err']:.1e})"
                )
                for name in variants:
                    v = r[name]
                    total[name] += v["us"]
                    text += (
                        f"; {name} {v['us']:7.1f} us ({floor / v['us']:4.0%}) at {v['best']} "
                        f"[configs {v['spread_us'][0]:.1f} / {v['spread_us'][1]:.1f} / "
                        f"{v['spread_us'][2]:.1f}, err {v['err']:.1e}]"
                    )
                print(text, flush=True)
            print(
                f"{str(dtype)[6:]}: one conv of each shape, "
                + ", ".join(f"{name} {us:.1f} us" for name, us in total.items())
                + " (ConvNeXt-tiny runs 3, 3, 9, 3 of them)"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
