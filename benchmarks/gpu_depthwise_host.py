"""Host time of one depthwise convolution call: codegen-triton's strip kernel through its direct
relaunch (``_depthwise._Launch``: Triton's C launcher), the same kernel through Triton's
``fn[grid]``, and cuDNN's ``F.conv2d``, on ConvNeXt-tiny's 7x7 shapes (channels-last, bf16).

Why: session 47 (H100) put ConvNeXt-tiny's training step with the strip kernel 2.8 ms of host
time behind cuDNN's (36 strip launches a step through ``fn[grid]``); codegen-triton 0.9.29
relaunches the kept binary directly. Expected: the direct call within a few microseconds of
``F.conv2d``'s, ``fn[grid]``'s 10-30 us more.

Measured per case: the wall time of ``--calls`` back-to-back calls on a small batch (the GPU
queue does not fill, so the loop's time is the host's), divided by the calls, best of
``--rounds``; each result checked against cuDNN's.

    python3 benchmarks/gpu_depthwise_host.py [--batch 2] [--calls 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import faulthandler
import time

import torch
import torch.nn.functional as F
from torchkiln_codegen_triton import _depthwise as depthwise

#: ConvNeXt-tiny's depthwise 7x7s: (channels, height = width)
CONVNEXT_TINY = ((96, 56), (192, 28), (384, 14), (768, 7))


def _host_us(call, calls: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, time.perf_counter() - start)
        torch.cuda.synchronize()
    return best / calls * 1e6


def _case(c: int, hw: int, args: argparse.Namespace) -> str:
    """One shape's row: host microseconds a call of each path, and the largest difference."""
    x = torch.randn(args.batch, c, hw, hw, device="cuda", dtype=torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    weight = torch.randn(c, 1, 7, 7, device="cuda", dtype=torch.bfloat16) / 7
    bias = torch.randn(c, device="cuda", dtype=torch.bfloat16)
    taps = weight.permute(1, 2, 3, 0).contiguous()

    def strip() -> torch.Tensor:
        return depthwise.conv_depthwise(x, taps, bias, (3, 3))

    def cudnn() -> torch.Tensor:
        return F.conv2d(x, weight, bias, padding=3, groups=c)

    got, want = strip().float(), cudnn().float()
    diff = ((got - want).abs().max() / want.abs().max()).item()
    _host_us(strip, 10, 1)  # the binary kept by the first call is relaunched from the second
    (launch,) = [v for k, v in depthwise._LAUNCHES.items() if k[0] == x.shape]
    direct = _host_us(strip, args.calls, args.rounds)
    stream_for = depthwise.stream_for
    depthwise.stream_for = lambda device: None  # every launch through fn[grid]
    try:
        slow = _host_us(strip, args.calls, args.rounds)
    finally:
        depthwise.stream_for = stream_for
    cudnn_us = _host_us(cudnn, args.calls, args.rounds)
    note = "" if launch.ready else "  (no ready binary: the direct column is fn[grid] too)"
    return f"{c:>5} x {hw:<3} {direct:>10.1f} {slow:>12.1f} {cudnn_us:>9.1f} {diff:>9.1e}{note}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hang-s", type=float, default=200)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    torch.manual_seed(0)
    print(f"{'C x HW':>10} {'direct us':>10} {'fn[grid] us':>12} {'cuDNN us':>9} {'max diff':>9}")
    for c, hw in CONVNEXT_TINY:
        print(_case(c, hw, args), flush=True)


if __name__ == "__main__":
    main()
