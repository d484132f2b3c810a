"""An A/B of two torchkiln option sets on one model's training step (or, with ``--infer``, its
inference in ``--dtype``, under ``torch.no_grad``), in one process.

Separate bench runs of the two options on a noisy GPU machine disagreed by more than the change
being measured (session 37: eager itself moved 16.7 -> 15.4 ms between two runs). Here both
compiled copies of the model live in one process and their rounds alternate (A, B, B, A, ...),
each round the median of ``--steps`` steps (forward, backward, AdamW) timed by the wall clock
after a device synchronization. Prints per-round times and the median of the per-round ratios
B / A with its spread. Each compile's seconds by phase (``torchkiln.report``) are printed after
it; the first compile also warms caches the second reuses, so compare compile times with the
order swapped too.

    python3 benchmarks/gpu_options_ab.py --suite timm --model resnet50 --batch 64 \\
        --a '{}' --b '{"loop_ir": {"combo_kernels": "never"}}'
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import faulthandler
import json
import statistics
import time

import torch
import torchkiln
from torchkiln.bench.suites import load_suite
from torchkiln.bench.train import Variant, _no_dropout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", default="timm")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch", type=int, default=0, help="0: the suite's full-size batch")
    parser.add_argument(
        "--a",
        default="{}",
        help="option set A, JSON; triton_options / cpp_options as dicts of their fields",
    )
    parser.add_argument("--b", default='{"loop_ir": {"combo_kernels": "never"}}')
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--hang-s", type=float, default=400)
    parser.add_argument("--infer", action="store_true", help="time inference, not training")
    parser.add_argument("--dtype", default="bfloat16", help="the model's dtype with --infer")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    spec = next(s for s in load_suite(args.suite, "full") if s.name == args.model)
    base, inputs = spec.build(args.batch or spec.batch or 64)
    base = _no_dropout(base).train().cuda()
    inputs = tuple(v.cuda() if isinstance(v, torch.Tensor) else v for v in inputs)
    if args.infer:
        dtype = getattr(torch, args.dtype)
        base = base.eval().to(dtype)
        inputs = tuple(
            v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for v in inputs
        )

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16)

    variants = {}
    for name, options in (("A", args.a), ("B", args.b)):
        model = copy.deepcopy(base)
        compiled = torchkiln.compile(model, options=json.loads(options))
        variants[name] = _Inference(compiled) if args.infer else Variant(model, compiled, autocast)
        start = time.perf_counter()
        variants[name].step(inputs)
        torch.cuda.synchronize()
        report = torchkiln.report(compiled)
        kernels = sum(g.kernels for g in report.graphs)
        print(
            f"{name} {options}: compiled in {time.perf_counter() - start:.1f} s, {kernels} kernels"
        )
        phases: dict[str, float] = {}
        for g in report.graphs:
            for phase, seconds in g.phases.items():
                phases[phase] = round(phases.get(phase, 0.0) + seconds, 2)
        print(f"  {name} compile phases (s): {phases}")
        for line in sorted({ln for g in report.graphs for ln in g.linears}):
            print(f"  {name} linear: {line}")
        for _ in range(3):
            variants[name].step(inputs)
    times: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            v = variants[name]
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.steps):
                v.step(inputs)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - start) * 1e3 / args.steps)
    ratios = sorted(b / a for a, b in zip(times["A"], times["B"]))
    for name in ("A", "B"):
        print(f"{name}: median {statistics.median(times[name]):.3f} ms, rounds {times[name]}")
    print(
        f"{args.model} batch {args.batch or spec.batch}: B / A median {statistics.median(ratios):.4f}"
        f" (rounds {ratios[0]:.4f}-{ratios[-1]:.4f})"
    )


class _Inference:
    """A compiled model's inference call, as a variant's ``step``."""

    def __init__(self, compiled) -> None:
        self.compiled = compiled

    def step(self, inputs) -> None:
        with torch.no_grad():
            self.compiled(*inputs)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
