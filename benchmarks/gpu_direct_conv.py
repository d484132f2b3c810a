"""Direct convolutions (loop-ir's generated code summing taps) against cuDNN, per convolution shape
of the timm models at their benchmark batch sizes: which shapes the rule
``LoopIROptions.direct_convolution_taps`` should send to generated code.

Every 2-D convolution of each model that is not a 1x1 of one group is recorded (input size,
channels, kernel, stride, padding, dilation, groups) with a forward hook; each distinct shape
is then compiled alone, as ``act(conv(x) + bias)`` (the convolution's batch norm is folded into
its bias at inference, the activation follows), in inference mode with channels-last input as
the models run it, twice: ``direct_convolution_taps=0`` (cuDNN, the bias and activation in a
kernel of their own) and the default (one generated kernel). Device time per call by CUDA events
with the queue kept full; and the bytes that must move (input read once, output written once)
over that time, as a fraction of 4.3 TB/s.

    python3 benchmarks/gpu_direct_conv.py [--models mobilenetv3_large_100,convnext_tiny]
        [--dtypes bfloat16,float32] [--json out.json]
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import statistics
from typing import Any

import torch
from torch import nn

#: the benchmark command's batch sizes (torchkiln/bench's full-size timm suite)
BATCH = {
    "resnet50": 64,
    "mobilenetv3_large_100": 128,
    "vit_base_patch16_224": 64,
    "convnext_tiny": 64,
    "efficientnet_b0": 128,
}


def shapes_of(name: str, batch: int) -> list[tuple[Any, ...]]:
    import timm

    model = timm.create_model(name).eval()
    found: list[tuple[Any, ...]] = []

    def hook(mod: nn.Conv2d, args: tuple[torch.Tensor, ...], _out: Any) -> None:
        if mod.kernel_size == (1, 1) and mod.groups == 1:
            return
        _n, c, h, w = args[0].shape
        key = (
            batch,
            c,
            h,
            w,
            mod.out_channels,
            mod.kernel_size,
            mod.stride,
            mod.padding,
            mod.dilation,
            mod.groups,
        )
        found.append(key)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    for h in handles:
        h.remove()
    return found


def device_ms(fn: Any, x: torch.Tensor, reps: int = 50) -> float:
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def run_shape(key: tuple[Any, ...], dtype: torch.dtype) -> dict[str, Any]:
    import torchkiln

    n, c, h, w, cout, k, s, p, d, g = key
    conv = nn.Conv2d(c, cout, k, stride=s, padding=p, dilation=d, groups=g)
    model = nn.Sequential(conv, nn.Hardswish()).eval().to("cuda", dtype)
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
    if c > 3:  # a stem reads the NCHW image; every later convolution a channels-last activation
        x = x.contiguous(memory_format=torch.channels_last)
    row: dict[str, Any] = {"shape": str(key), "dtype": str(dtype).split(".")[1]}
    with torch.no_grad():
        expected = model(x)
        row["eager_ms"] = device_ms(model, x)
        for label, taps in (("cudnn", 0), ("direct", 64)):
            compiled = torchkiln.compile(
                model, options={"loop_ir": {"direct_convolution_taps": taps}}
            )
            got = compiled(x)
            err = (got.float() - expected.float()).abs().max().item()
            scale = expected.float().abs().max().item() + 1e-6
            row[f"{label}_ms"] = device_ms(compiled, x)
            row[f"{label}_rel_err"] = err / scale
    moved = (x.numel() + expected.numel()) * x.element_size()
    row["direct_tbs_fraction"] = moved / (row["direct_ms"] * 1e-3) / 4.3e12
    row["speedup"] = row["cudnn_ms"] / row["direct_ms"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mobilenetv3_large_100,efficientnet_b0,convnext_tiny")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--json", default="")
    parser.add_argument("--hang-s", type=float, default=300)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
        for name in args.models.split(","):
            shapes = shapes_of(name, BATCH[name])
            counts: dict[tuple[Any, ...], int] = {}
            for key in shapes:
                counts[key] = counts.get(key, 0) + 1
            total = {"cudnn_ms": 0.0, "direct_ms": 0.0}
            for key, count in counts.items():
                row = run_shape(key, dtype)
                row.update(model=name, count=count)
                rows.append(row)
                for t in total:
                    total[t] += row[t] * count
                print(
                    f"{name} {row['dtype']} x{count} {key}: eager {row['eager_ms'] * 1e3:.1f} us, "
                    f"cuDNN+act {row['cudnn_ms'] * 1e3:.1f} us, direct {row['direct_ms'] * 1e3:.1f}"
                    f" us ({row['direct_tbs_fraction']:.0%} of 4.3 TB/s), {row['speedup']:.2f}x, "
                    f"err {row['direct_rel_err']:.1e}",
                    flush=True,
                )
            print(
                f"== {name} {str(dtype).split('.')[1]}: every such convolution, cuDNN + activation "
                f"{total['cudnn_ms']:.3f} ms, direct {total['direct_ms']:.3f} ms",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
