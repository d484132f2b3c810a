"""CPU: wall time of each generated C++ kernel in a conv-suite training step (forward,
``sum().backward()``), slowest first, with the step's time beside: which kernel to look at.

    python benchmarks/cpu_kernel_times.py --model mobilenet [--batch 32] [--top 8] [--source]

Each kernel's launcher is wrapped with a timer before compiling (``_make_launcher``), so the
figures include the ctypes call. Session 31: mobilenet at batch 32 spent 67 of its forward's
145 ms of generated kernels in four BN + SiLU kernels that also copied the saved convolution
output back to NCHW (oneDNN's channels-last layout in a training graph, loop-ir 0.8.18 turned
that off); vgg 21 of 59 ms in its BN + ReLU + max pool with indices.
"""

from __future__ import annotations

import argparse
import collections
import time

import torchkiln
from torchkiln.bench import convnets
from torchkiln_codegen_cpp import backend as cpp_backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet", choices=sorted(convnets.MODELS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--source", action="store_true", help="print each listed kernel's C++")
    args = parser.parse_args()

    seconds: dict[str, float] = collections.defaultdict(float)
    sources: dict[str, str] = {}
    make_launcher = cpp_backend._make_launcher

    def timed(kernel, nbuf, nsize):
        launch = make_launcher(kernel, nbuf, nsize)
        key = f"{kernel.name} ({kernel.path})"
        sources[key] = kernel.source

        def call(*a):
            start = time.perf_counter()
            launch(*a)
            seconds[key] += time.perf_counter() - start

        return call

    cpp_backend._make_launcher = timed
    model, (x,) = convnets.build(args.model, args.batch)
    model.train()
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False})
    for _ in range(2):
        compiled(x).float().sum().backward()
    seconds.clear()
    start = time.perf_counter()
    for _ in range(args.steps):
        compiled(x).float().sum().backward()
    step = (time.perf_counter() - start) / args.steps
    print(
        f"step {step * 1e3:.1f} ms, generated kernels {sum(seconds.values()) / args.steps * 1e3:.1f} ms"
    )
    for key, s in sorted(seconds.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{s / args.steps * 1e3:8.2f} ms  {key}")
        if args.source:
            print(sources[key])


if __name__ == "__main__":
    main()
