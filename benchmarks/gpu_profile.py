"""Where a zoo model's time goes on CUDA: torch.profiler tables for eager and torchkiln, and the
generated wrapper code. A diagnosis tool for the GPU session (not a benchmark: the profiler adds
overhead; speed ratios come from `python -m torchkiln bench`).

    python benchmarks/gpu_profile.py unet resnet      # from the repo root, packages on PYTHONPATH
    python benchmarks/gpu_profile.py --python unet    # cProfile of the host side instead
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


def main(names: list[str]) -> None:
    import torchkiln
    from torchkiln.bench import zoo

    for name in names:
        model, inputs = zoo.build(name)
        model = model.to("cuda", torch.bfloat16)
        inputs = tuple(
            t.to("cuda", torch.bfloat16) if t.is_floating_point() else t.to("cuda") for t in inputs
        )
        compiled = torchkiln.compile(model)
        with torch.no_grad():
            for label, fn in (("eager", model), ("torchkiln", compiled)):
                for _ in range(10):
                    fn(*inputs)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        fn(*inputs)
                    torch.cuda.synchronize()
                print(f"===== {name} {label}")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18))
        report = torchkiln.report(compiled)
        for g in report.graphs:
            print(f"===== {name} graph {g.index}: kernels {g.kernels} externs {g.extern_calls}")
            src = Path(g.source_path) if g.source_path else None
            if src is not None and src.exists():
                print(src.read_text()[:8000])


def python_profile(name: str, calls: int = 300) -> None:
    """cProfile of the host side of ``calls`` torchkiln calls (what Python does per call)."""
    import cProfile
    import pstats

    import torchkiln
    from torchkiln.bench import zoo

    model, inputs = zoo.build(name)
    model = model.to("cuda", torch.bfloat16)
    inputs = tuple(
        t.to("cuda", torch.bfloat16) if t.is_floating_point() else t.to("cuda") for t in inputs
    )
    compiled = torchkiln.compile(model)
    with torch.no_grad():
        for _ in range(20):
            compiled(*inputs)
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            compiled(*inputs)
        torch.cuda.synchronize()
        prof.disable()
    print(f"===== {name} cProfile, {calls} calls")
    pstats.Stats(prof).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--python"]:
        for n in sys.argv[2:] or ["unet"]:
            python_profile(n)
    else:
        main(sys.argv[1:] or ["unet"])
