"""Matmul templates on the GPU (loop-ir's matmul_templates.py, codegen-triton's _template.py):
for the linear layers of the full-size suites whose activation cuBLASLt has no epilogue for,
each compiled alone through ``torchkiln.compile`` in the default mode (the template predicted
from the sizes), with ``autotune`` (timed at compile time, as the max-autotune modes do) and
with templates off ("never"): the decision and its reason (the compile's linear log), the
compile time, the error of each against a float64 reference (in the output's magnitude), and
CUDA-event times. With ``--profile``, each compile's host time a call (the enqueue of 50
calls, unsynchronised) and its kernels with their device time a call (torch.profiler): whether a
case slower than eager is bound by the host or by a kernel.

    python3 benchmarks/gpu_template_check.py [--dtypes bfloat16] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import time

import torch
import torchkiln
from gpu_epilogue_check import events_us

#: (name, M, K, N, activation)
CASES = [
    ("bert intermediate (16x512)", 8192, 768, 3072, "gelu"),
    ("vit-base mlp fc1 (64x197)", 12608, 768, 3072, "gelu"),
    ("distilbert ffn lin1 (32x512)", 16384, 768, 3072, "gelu"),
    ("llama gate silu*up (8x1024)", 8192, 1024, 2816, "silu_mul"),
    ("bert output + residual", 8192, 3072, 768, "residual"),
    ("bert intermediate (batch 1)", 512, 768, 3072, "gelu"),
    ("convnext-tiny stage 1 fc1 (64)", 200704, 96, 384, "gelu"),
    ("convnext-tiny stage 2 fc1 (64)", 50176, 192, 768, "gelu"),
    ("convnext-tiny stage 3 fc1 (64)", 12544, 384, 1536, "gelu"),
    ("convnext-tiny stage 4 fc1 (64)", 3136, 768, 3072, "gelu"),
]

#: the compiles compared: the default (predicted), timed, templates off
MODES = {
    "default": {},
    "autotune": {"autotune": True},
    "never": {"loop_ir": {"matmul_templates": "never"}},
}


class Block(torch.nn.Module):
    def __init__(self, k: int, n: int, act: str) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(k, n)
        self.up = torch.nn.Linear(k, n, bias=False) if act == "silu_mul" else None
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.act == "gelu":
            return torch.nn.functional.gelu(h)
        if self.act == "silu_mul":
            return torch.nn.functional.silu(h) * self.up(x)
        return h + x[..., : h.shape[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dtypes", default="bfloat16")
    parser.add_argument("--hang-s", type=float, default=200)
    parser.add_argument(
        "--tiles",
        default="",
        help="instead of the modes, compile each case with the template forced at these tiles "
        "(comma-separated BMxBNxBK:warps:stages), and with templates off",
    )
    parser.add_argument("--cases", default="", help="the cases whose names start with these")
    parser.add_argument(
        "--cprofile",
        action="store_true",
        help="where each compiled call's host time goes: cProfile of 2000 calls, the functions "
        "by their own time",
    )
    parser.add_argument(
        "--profile", action="store_true", help="host time a call and each kernel's device time"
    )
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    modes = {t: {"tile": t} for t in args.tiles.split(",")} if args.tiles else dict(MODES)
    if args.tiles:
        modes["never"] = MODES["never"]
    prefixes = tuple(args.cases.split(",")) if args.cases else ("",)
    for dtype in [getattr(torch, d) for d in args.dtypes.split(",")]:
        for name, m, k, n, act in CASES:
            if name.startswith(prefixes):
                _row(dtype, name, m, k, n, act, modes, args.profile, args.cprofile)


@contextlib.contextmanager
def _forcing(options: dict):
    """``TritonBackend.choose_matmul_template`` answering the forced tile (``BMxBNxBK:warps:
    stages``), while compiling."""
    from torchkiln_codegen_triton import _template
    from torchkiln_codegen_triton.backend import TritonBackend

    if "tile" not in options:
        yield options
        return
    blocks, warps, stages = options["tile"].split(":")
    bm, bn, bk = (int(b) for b in blocks.split("x"))
    tile = _template.Tile(bm, bn, bk, num_warps=int(warps), num_stages=int(stages)).items()

    def choose(self, requests, buffers):
        return [(tile, f"forced {options['tile']}") for _ in requests]

    saved = TritonBackend.choose_matmul_template
    TritonBackend.choose_matmul_template = choose
    try:
        yield {"graph_cache": False}
    finally:
        TritonBackend.choose_matmul_template = saved


def _host_and_kernels(fn, calls: int = 50) -> str:
    """Host microseconds a call (enqueueing ``calls`` calls without a synchronize) and each
    kernel's device microseconds a call."""
    from gpu_kernel_profile import kernels
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host_us = (time.perf_counter() - start) * 1e6 / calls
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    named = sorted(kernels(prof, calls).items(), key=lambda kv: -kv[1][0])
    listed = ", ".join(f"{n[:60]} {ms * 1e3:.1f}" for n, (ms, _) in named)
    return f"host {host_us:.1f} us; kernels us: {listed}"


def _host_functions(fn, calls: int = 2000, top: int = 25) -> str:
    """cProfile of ``calls`` calls (unsynchronised; the queue drained every 100): the functions
    with the most own time, in microseconds a call."""
    import cProfile
    import io
    import pstats

    fn()
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for i in range(calls):
        fn()
        if i % 100 == 99:
            torch.cuda.synchronize()
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    return f"cProfile of {calls} calls (seconds in total; / {calls} for a call):\n{text.getvalue()}"


def _row(
    dtype, name, m, k, n, act, modes, profile_calls: bool = False, cprofile: bool = False
) -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    block = Block(k, n, act).to(dev).eval()
    x = torch.randn(m, k, device=dev)
    with torch.no_grad():
        ref = block.double()(x.double())
        block = block.to(dtype)
        x = x.to(dtype)
        scale = ref.abs().max().item()
        line = [f"{name:30s} {m}x{k}x{n} {act:9s}"]
        eager_us = events_us(lambda: block(x))
        line.append(f"eager {eager_us:.1f} us")
        if profile_calls:
            line.append(f"eager {_host_and_kernels(lambda: block(x))}")
        for mode, options in modes.items():
            torchkiln.reset()
            with _forcing(options) as opts:
                compiled = torchkiln.compile(block, options={**opts, "strict": True})
                start = time.perf_counter()
                out = compiled(x)
                compile_s = time.perf_counter() - start
            err = (out.double() - ref).abs().max().item() / scale
            us = events_us(lambda c=compiled: c(x))
            logs = [
                ln
                for g in torchkiln.report(compiled).graphs
                for ln in g.linears
                if "kernel" in ln or "extern" in ln
            ]
            line.append(
                f"{mode}: {us:.1f} us err {err:.2e} compiled in {compile_s:.1f} s "
                f"[{'; '.join(logs)}]"
            )
            if profile_calls:
                line.append(f"{mode} {_host_and_kernels(lambda c=compiled: c(x))}")
            if cprofile:
                print(f"--- {name} {mode}", _host_functions(lambda c=compiled: c(x)), flush=True)
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    main()
