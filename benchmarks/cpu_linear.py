"""Linear layers on the CPU, step by step: torchkiln before this work ("before":
``group_linears=False, mkldnn_linear="never"``), with linears of a shared input grouped into one
GEMM ("grouped"), and with the oneDNN linears chosen by measurement too ("default", loop-ir's
defaults), against eager and torch.compile, on the hf suite's small transformers at a chosen
sequence length (``--suite zoo``: the zoo's models), timed interleaved in one process by
process CPU time.

    OMP_NUM_THREADS=1 python benchmarks/cpu_linear.py --seq 128 --rounds 15
    OMP_NUM_THREADS=1 python benchmarks/cpu_linear.py --suite zoo --rounds 30

Each round runs every variant ``--calls`` times; the table gives each variant's median per call
and its speedup over eager. ``torch.compile`` is the comparison only (never used by packages/).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchkiln
from torchkiln.bench.suites import hf_suite, zoo_suite

VARIANTS = {
    "before": {"group_linears": False, "mkldnn_linear": "never"},
    "grouped": {"group_linears": True, "mkldnn_linear": "never"},
    "default": {},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--models", default="")
    parser.add_argument("--suite", default="hf", choices=("hf", "zoo"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    wanted = set(filter(None, args.models.split(",")))
    names = [*VARIANTS, "tc"]
    print(
        f"{'model':12} {'eager ms':>9} "
        + " ".join(f"{n:>9}" for n in names)
        + "   speedups over eager ("
        + " / ".join(names)
        + ")"
    )
    specs = hf_suite("small", seq=args.seq) if args.suite == "hf" else zoo_suite()
    for spec in specs:
        if wanted and spec.name not in wanted:
            continue
        model, inputs = spec.build(args.batch)
        model.eval()
        variants = {"eager": model}
        for name, loop_ir in VARIANTS.items():
            variants[name] = torchkiln.compile(
                model, options={"graph_cache": False, "loop_ir": loop_ir}
            )
        variants["tc"] = torch.compile(model)
        times: dict[str, list[float]] = {k: [] for k in variants}
        with torch.no_grad():
            for f in variants.values():
                f(*inputs)
                f(*inputs)
            for _ in range(args.rounds):
                for name, f in variants.items():
                    start = time.process_time()
                    for _ in range(args.calls):
                        f(*inputs)
                    times[name].append((time.process_time() - start) / args.calls * 1e3)
        med = {k: statistics.median(v) for k, v in times.items()}
        speed = " / ".join(f"{med['eager'] / med[k]:.2f}x" for k in names)
        print(
            f"{spec.name:12} {med['eager']:9.2f} "
            + " ".join(f"{med[k]:9.2f}" for k in names)
            + f"   {speed}",
            flush=True,
        )
        linears = torchkiln.report(variants["default"]).graphs[0].linears
        grouped = sum("one GEMM" in line for line in linears)
        chosen = sum("oneDNN linear" in line for line in linears)
        print(f"{'':12} default: {grouped} groups, oneDNN for {chosen} single linears", flush=True)


if __name__ == "__main__":
    main()
