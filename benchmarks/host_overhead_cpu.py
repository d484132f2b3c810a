"""The host (Python) side of a compiled step, measured on the CPU: a full-size model compiled
with the Triton backend, its kernels' GPU launches replaced by no-ops (the launch path up to
Triton's launcher still runs: the kernel object, the ready/aligned/keyed relaunch paths, split
reductions' partials, the generated wrapper's allocations and views), the ATen externs run for
real on tiny inputs. What it prints is what the wrapper costs per step and per launch with no
GPU in the way: on the H200 a step whose wall time is twice its kernel time is host-bound, and
this separates the Python part of that host time from the driver's.

    TRITON_INTERPRET=1 python benchmarks/host_overhead_cpu.py --model bert --task train
    TRITON_INTERPRET=1 python benchmarks/host_overhead_cpu.py --model bert --task train --profile
    TRITON_INTERPRET=1 python benchmarks/host_overhead_cpu.py --model bert --task train --hidden 48  # host time only
    TRITON_INTERPRET=1 python benchmarks/host_overhead_cpu.py --model bert --task train --hidden 48 --ab
    TRITON_INTERPRET=1 python benchmarks/host_overhead_cpu.py --model mobilenet --task infer --batch 2

``--ab`` compiles the model twice in one process, once with wrappers that launch each kernel
through its own call (what loop-ir generated before the per-call stream: ``kernel(*args)``,
which fetches the device and stream and checks alignment per launch), and times blocks of each
in turn: on a shared machine, load that drifts between two processes shows as a difference
that is not there; alternating blocks in one process sees the same load.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import time
from typing import Any

import torch

LAUNCHES = [0]


class _NoLaunch:
    """Stands in for a compiled Triton binary: ``run`` counts the launch and does nothing."""

    function = packed_metadata = None

    def run(self, *args: Any) -> None:
        LAUNCHES[0] += 1


class _FakeJit:
    """Stands in for a ``@triton.jit`` function: its first run "compiles" to ``_NoLaunch``."""

    def __init__(self) -> None:
        self.binary = _NoLaunch()

    def run(self, *params: Any, grid: Any, warmup: bool, num_warps: int, **consts: Any) -> Any:
        LAUNCHES[0] += 1
        return self.binary

    def __getitem__(self, grid: Any) -> Any:
        return lambda *a, **k: LAUNCHES.__setitem__(0, LAUNCHES[0] + 1)


def _fake_gpu_kernels() -> None:
    """Every kernel compiled from now on takes the CUDA launch path with no-op launches."""
    from torchkiln_codegen_triton import wrapper as W

    W.fast_launcher = lambda: (lambda: 0, lambda device: 0)
    # the wrappers' stream, fetched once per call: the CPU "device" passes for the current GPU
    W.TritonCompiledKernel.stream_for = staticmethod(lambda device: 0)
    init = W.TritonCompiledKernel.__init__

    def fake_init(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self._fn = _FakeJit()
        if self._finish is not None:
            self._finish = _FakeJit()
        self._cuda, self._device_index, self._on_cuda = True, None, False

    W.TritonCompiledKernel.__init__ = fake_init


def build(
    model: str, task: str, batch: int, seq: int, hidden: int | None = None
) -> tuple[Any, Any]:
    from torchkiln.bench import convnets
    from torchkiln.bench.train import _no_dropout, loss_of

    if model in convnets.MODELS:  # the conv suite's nets (64x64 images): convolution externs
        net, (images,) = convnets.build(model, batch)
        if task == "train":
            net = net.train()

            def train_step(fn: Any) -> None:
                net.zero_grad(set_to_none=True)
                loss_of(fn(images)).backward()

            return net, train_step

        def infer_step(fn: Any) -> None:
            with torch.no_grad():
                fn(images)

        return net, infer_step
    import transformers

    configs = {
        "bert": (transformers.BertForMaskedLM, transformers.BertConfig),
        "gpt2": (transformers.GPT2LMHeadModel, transformers.GPT2Config),
    }
    cls, config = configs[model]
    # the full width and depth; a small vocabulary keeps the CPU time of the head's matmuls (not
    # what this measures) small. ``hidden`` narrows the layers (the same graph: the same kernels,
    # externs and views per step) so that the externs' CPU time no longer hides the host's
    narrow = (
        {}
        if hidden is None
        else (
            {"hidden_size": hidden, "intermediate_size": 4 * hidden}
            if model == "bert"
            else {"n_embd": hidden}
        )
    )
    net = cls(config(vocab_size=1024, **narrow))
    ids = torch.randint(0, 1000, (batch, seq))
    if task == "train":
        net = _no_dropout(net).train()

        def step(fn: Any) -> None:
            net.zero_grad(set_to_none=True)
            loss_of(fn(ids)).backward()
    else:
        net = net.eval()

        def step(fn: Any) -> None:
            with torch.no_grad():
                fn(ids)

    return net, step


def _best_ms(step: Any, fn: Any, steps: int, repeat: int) -> tuple[float, float]:
    """Milliseconds per step of the fastest of ``repeat`` blocks of ``steps`` steps: wall time,
    and the process's CPU time (one thread: what the step costs the host, less the time other
    processes of a shared machine took the core away)."""
    best = best_cpu = float("inf")
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(fn)
        best = min(best, (time.perf_counter() - start) / steps * 1000)
        best_cpu = min(best_cpu, (time.process_time() - cpu) / steps * 1000)
    return best, best_cpu


def _per_kernel_launches(net: Any, step: Any) -> Any:
    """``net`` compiled with wrappers that call each kernel (``kernel(*args)``), not
    ``kernel.launch_in(stream, *args)`` with the stream fetched once per wrapper call (the
    graphs compile at their first call, forward and backward: three steps run here)."""
    import torchkiln
    from torchkiln_loop_ir import wrapper as loop_wrapper

    protocol = loop_wrapper.StreamLaunch
    loop_wrapper.StreamLaunch = type("NoStreamLaunch", (), {})  # no kernel is one: isinstance fails
    try:
        compiled = torchkiln.compile(net, options={"codegen": "triton"})
        for _ in range(3):
            step(compiled)
        return compiled
    finally:
        loop_wrapper.StreamLaunch = protocol


def _compare_per_kernel_launches(
    net: Any, step: Any, compiled: Any, steps: int, rounds: int
) -> None:
    old = _per_kernel_launches(net, step)
    times: dict[str, list[float]] = {"per-kernel launches": [], "stream per wrapper call": []}
    for _ in range(rounds):
        for name, fn in (("per-kernel launches", old), ("stream per wrapper call", compiled)):
            times[name].append(_best_ms(step, fn, steps, 1)[1])
    for name, ts in times.items():
        ts.sort()
        print(
            f"{name}: process CPU ms per step, median {ts[len(ts) // 2]:.2f}, min {ts[0]:.2f} "
            f"over {rounds} alternating blocks of {steps} steps"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--model",
        default="bert",
        help="bert, gpt2, or a conv-suite net (torchkiln.bench.convnets: mobilenet, "
        "resnet_bottleneck, vgg)",
    )
    parser.add_argument("--task", default="train")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--hidden",
        type=int,
        default=None,
        help="narrow the layers to this width (a multiple of 12, the heads): the same "
        "graph with cheap externs, so the step time is mostly host time",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="time this many blocks of --steps steps and report the fastest (the "
        "machine is shared: the best block is the least disturbed)",
    )
    parser.add_argument(
        "--ab",
        action="store_true",
        help="also time wrappers that launch kernel by kernel (see the docstring), "
        "in alternating blocks of the same process",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--profile-out", default=None, help="also write the profile's stats to this file"
    )
    args = parser.parse_args()
    import torchkiln

    torch.manual_seed(0)
    torch.set_num_threads(1)  # the host path is single-threaded; 2 cores shared by OpenMP skew it
    net, step = build(args.model, args.task, args.batch, args.seq, args.hidden)
    for _ in range(2):
        step(net)
    eager, eager_cpu = _best_ms(step, net, args.steps, args.repeat)
    _fake_gpu_kernels()
    compiled = torchkiln.compile(net, options={"codegen": "triton"})
    t0 = time.perf_counter()
    step(compiled)
    compile_s = time.perf_counter() - t0
    step(compiled)
    step(compiled)
    LAUNCHES[0] = 0
    profiler = cProfile.Profile() if args.profile else None
    with profiler or contextlib.nullcontext():
        ours, ours_cpu = _best_ms(step, compiled, args.steps, args.repeat)
    launches = LAUNCHES[0] / (args.steps * args.repeat)
    print(
        f"{args.model} {args.task} (batch {args.batch}, seq {args.seq}): eager step "
        f"{eager:.2f} ms on the CPU; torchkiln step with no-op GPU launches {ours:.2f} ms, "
        f"{launches:.0f} launches per step ({1000 * ours / max(launches, 1):.1f} us per "
        f"launch, externs' CPU time included); first call {compile_s:.1f} s\n"
        f"process CPU time per step: eager {eager_cpu:.2f} ms, torchkiln {ours_cpu:.2f} ms"
    )
    if args.ab:
        _compare_per_kernel_launches(net, step, compiled, args.steps, max(args.repeat, 5))
    if profiler is not None:
        stats = pstats.Stats(profiler)
        stats.sort_stats("tottime").print_stats(30)
        if args.profile_out:
            stats.dump_stats(args.profile_out)


if __name__ == "__main__":
    main()
