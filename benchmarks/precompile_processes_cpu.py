"""Wall time of compiling a training step's Triton kernels for an H100/H200 (sm_90) on this
machine, no GPU needed: precompile on threads versus in compile worker processes.

    TRITON_INTERPRET=0 python benchmarks/precompile_processes_cpu.py [--model bert] [--kernels 64]
        [--workers N] [--json OUT.json]

The kernels are those torchkiln generates for one training step of a full-size model at a
small batch and sequence (``train_compile_cpu.py``'s models), in their GPU form (libdevice), the
launches skipped. Each is then compiled for GPUTarget("cuda", 90, 32) with Triton's compiler and
ptxas, Triton's driver in this process replaced by one that only names the target (as in a
worker), into a fresh TRITON_CACHE_DIR per mode:

- threads: ``precompile(..., processes=False)``, the thread pool (Triton's AsyncCompileMode where
  present);
- processes, cold: ``processes=True`` with the worker pool started by it (the workers' imports
  included);
- processes, warm: again with the pool already running (as for every graph after the first).

For each mode: the wall seconds, and how many of the main process's own compiles were cache
hits (Triton's compilation listener). The gain is bounded by the CPU count (2 on the shared
CPU machine, which other work also loads: compare modes within one run only).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # kernels in their GPU form (read when they are generated)
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _kernels(model_name: str, batch: int, seq: int) -> list:
    """The Triton kernels of one training step of ``model_name``, launches skipped."""
    import torchkiln
    from torchkiln.bench.train import loss_of
    from torchkiln_codegen_triton import backend as backend_module
    from torchkiln_codegen_triton.wrapper import TritonCompiledKernel
    from train_compile_cpu import _model

    kernels: list = []
    compile_kernels = backend_module.TritonBackend.compile_kernels

    def recording(self, specs):
        made = compile_kernels(self, specs)
        kernels.extend(made)
        return made

    backend_module.TritonBackend.compile_kernels = recording
    TritonCompiledKernel.__call__ = lambda self, *a: None  # compile time only
    model, ids = _model(model_name, batch, seq)
    compiled = torchkiln.compile(model, options={"strict": True, "codegen": "triton"})
    model.zero_grad(set_to_none=True)
    loss_of(compiled(ids)).backward()
    return kernels


def _as_on_sm90(kernels: list, limit: int) -> list:
    """Distinct kernels (by source) whose first launch is known, as if their buffers were on a
    GPU (the source does not depend on it), at most ``limit``."""
    seen, chosen = set(), []
    for k in kernels:
        k._on_cuda = True
        if k.source in seen or k.warmup_call() is None:
            continue
        seen.add(k.source)
        chosen.append(k)
    return chosen[:limit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="bert")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--kernels", type=int, default=64)
    ap.add_argument("--workers", type=int, default=None, help="default: the CPU count")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch
    from torchkiln_codegen_triton import compile_pool
    from torchkiln_codegen_triton import precompile as P
    from torchkiln_codegen_triton._compile_worker import TargetOnlyDriver
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    begin = time.perf_counter()
    kernels = _as_on_sm90(_kernels(args.model, args.batch, args.seq), args.kernels)
    generated_s = time.perf_counter() - begin
    driver.set_active(TargetOnlyDriver(GPUTarget("cuda", 90, 32)))
    P.compiles_binaries = lambda: True
    torch.cuda.current_device = lambda: 0
    torch.cuda.device = lambda index: contextlib.nullcontext()
    compiles: list[bool] = []
    knobs.compilation.listener = lambda cache_hit, **_: compiles.append(cache_hit)

    def timed(processes: bool) -> dict:
        os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="tk-precompile-bench-")
        for k in kernels:  # forget binaries loaded by an earlier mode
            for fn in (k._fn, k._finish):
                if fn is not None:
                    fn.device_caches.clear()
        compiles.clear()
        start = time.perf_counter()
        if processes:
            P.start_workers(len(kernels), args.workers)
        done = P.precompile(kernels, args.workers, processes=processes)
        return {
            "wall_s": round(time.perf_counter() - start, 2),
            "kernels": done,
            "main_compiles": len(compiles),
            "main_cache_hits": sum(compiles),
            "workers_off": compile_pool.reason_off(),
        }

    result = {
        "model": args.model,
        "cpus": os.cpu_count(),
        "workers": args.workers,
        "distinct_kernels": len(kernels),
        "codegen_s": round(generated_s, 1),
        "threads": timed(False),
        "processes_cold": timed(True),
        "processes_warm": timed(True),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
