"""CPU: wall time of each generated C++ kernel in a conv-suite or small hf training step
(forward, a loss, backward), slowest first, with the step's time beside: which kernel to look at.

    python benchmarks/cpu_kernel_times.py --model mobilenet [--batch 32] [--top 8] [--source]
    python benchmarks/cpu_kernel_times.py --model bert [--x-lanes 0]   # the small hf models
    python benchmarks/cpu_kernel_times.py --model bert --size full --batch 1 --steps 2

Each kernel's launcher is wrapped with a timer before compiling (``_make_launcher``), so the
figures include the ctypes call. Session 31: mobilenet at batch 32 spent 67 of its forward's
145 ms of generated kernels in four BN + SiLU kernels that also copied the saved convolution
output back to NCHW (oneDNN's channels-last layout in a training graph, loop-ir 0.8.18 turned
that off); vgg 21 of 59 ms in its BN + ReLU + max pool with indices. Session 32 (small hf
models at batch 32): BERT's backward ran its two GELU backward + bias gradient kernels at about
3 ms each with ``--x-lanes 0`` (one x-loop, scalar), GPT-2's fused query-key-value gradient (a
masked cat) 0.79 ms with one loop and 1.07 ms as blocks of lanes (codegen-cpp 0.5.4 keeps it
one loop).
"""

from __future__ import annotations

import argparse
import collections
import time

import torchkiln
from torchkiln.bench import convnets, suites, train
from torchkiln_codegen_cpp import CppOptions
from torchkiln_codegen_cpp import backend as cpp_backend

HF_MODELS = ("bert", "distilbert", "gpt2", "t5_encoder", "llama")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default="mobilenet", choices=[*sorted(convnets.MODELS), *HF_MODELS]
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument(
        "--size", default="small", choices=("small", "full"), help="the hf models' configs"
    )
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--source", action="store_true", help="print each listed kernel's C++")
    parser.add_argument(
        "--x-lanes", type=int, default=CppOptions.x_lanes, help="CppOptions.x_lanes"
    )
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
    if args.model in HF_MODELS:
        spec = next(m for m in suites.hf_suite(args.size) if m.name == args.model)
        model, inputs = spec.build(args.batch)
        model = train._no_dropout(model)
    else:
        model, inputs = convnets.build(args.model, args.batch)
    model.train()
    options = {
        "strict": True,
        "graph_cache": False,
        "cpp_options": CppOptions(x_lanes=args.x_lanes),
    }
    compiled = torchkiln.compile(model, options=options)

    def step() -> None:
        train.loss_of(compiled(*inputs)).backward()

    for _ in range(2):
        step()
    seconds.clear()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
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
