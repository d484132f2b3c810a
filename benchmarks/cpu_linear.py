"""Linear layers on the CPU: torchkiln with and without oneDNN linears (loop-ir's
``mkldnn_linear`` option) against eager and torch.compile, on the hf suite's small transformers
at a chosen sequence length, timed interleaved in one process by process CPU time.

    OMP_NUM_THREADS=1 python benchmarks/cpu_linear.py --seq 128 --rounds 15

Each round runs every variant ``--calls`` times; the table gives each variant's median per call
and its speedup over eager. ``torch.compile`` is the comparison only (never used by packages/).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchkiln
from torchkiln.bench.suites import hf_suite


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--models", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    wanted = set(filter(None, args.models.split(",")))
    print(f"{'model':12} {'eager ms':>9} {'tk never':>9} {'tk measure':>10} {'tc':>9}   speedups (never / measure / tc)")
    for spec in hf_suite("small", seq=args.seq):
        if wanted and spec.name not in wanted:
            continue
        model, inputs = spec.build(args.batch)
        variants = {"eager": model}
        for mode in ("never", "measure"):
            variants[mode] = torchkiln.compile(model, options={
                "graph_cache": False, "loop_ir": {"mkldnn_linear": mode}})
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
        speed = " / ".join(f"{med['eager'] / med[k]:.2f}x" for k in ("never", "measure", "tc"))
        print(f"{spec.name:12} {med['eager']:9.2f} {med['never']:9.2f} {med['measure']:10.2f} "
              f"{med['tc']:9.2f}   {speed}", flush=True)
        linears = torchkiln.report(variants["measure"]).graphs[0].linears
        chosen = sum("oneDNN linear" in line for line in linears)
        print(f"{'':12} oneDNN for {chosen} of {len(linears)} linears", flush=True)


if __name__ == "__main__":
    main()
