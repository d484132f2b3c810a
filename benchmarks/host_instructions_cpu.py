"""Instructions per compiled step on the host, counted by callgrind: the steps of
``host_overhead_cpu.py`` (GPU launches replaced by no-ops) with instrumentation switched on for
the timed steps only. On a shared machine wall and CPU times of the same code vary by a third
between runs; the instruction count of a step repeats to a few parts in ten thousand, so two
versions of the host path compare by it (run each under the same command; ``--variant
per-kernel`` compiles wrappers that launch kernel by kernel, as before the per-call stream).

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \\
        python benchmarks/host_instructions_cpu.py --model bert --task train --hidden 48 --steps 10

(TRITON_INTERPRET=1 and PYTHONHASHSEED=0 set; valgrind prints ``Collected : N``, the
instructions of the ``--steps`` steps; divide by the steps. About two minutes, mostly startup.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import host_overhead_cpu as H  # noqa: E402 - the harness next to this file


def _instrument(on: bool) -> None:
    """Switch callgrind's instrumentation for this process (it polls for the request: wait)."""
    done = subprocess.run(
        ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"not under callgrind (callgrind_control: {done.stdout.strip()[-200:]})", flush=True)
    time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bert")
    parser.add_argument("--task", default="train")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--variant", choices=["current", "per-kernel"], default="current")
    args = parser.parse_args()
    import torchkiln

    torch.manual_seed(0)
    torch.set_num_threads(1)
    net, step = H.build(args.model, args.task, args.batch, args.seq, args.hidden)
    H._fake_gpu_kernels()
    if args.variant == "per-kernel":
        compiled = H._per_kernel_launches(net, step)
    else:
        compiled = torchkiln.compile(net, options={"codegen": "triton"})
        for _ in range(3):
            step(compiled)
    H.LAUNCHES[0] = 0
    _instrument(True)
    for _ in range(args.steps):
        step(compiled)
    _instrument(False)
    print(
        f"{args.model} {args.task} ({args.variant}): {args.steps} steps, "
        f"{H.LAUNCHES[0] / args.steps:.0f} launches per step",
        flush=True,
    )


if __name__ == "__main__":
    main()
