"""A main process compiling Triton kernels for an H100/H200 (sm_90) on a machine without one,
run as a script by test_compile_pool.py: Triton must compile for real here, so the process is
fresh (the test process has Triton in interpreter mode, which patches triton.language globally).

Triton's driver is replaced by one that only names the target (as in a compile worker), so the
main process's ``JITFunction.warmup`` computes its usual cache key and compiles with the CPU-only
compiler and ptxas; Triton's compilation listener records, for each compile in this process,
whether it was a cache hit. Prints one JSON line.

    python _sm90_main.py SCENARIO TMPDIR     (SCENARIO: workers | differ | few)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # before triton is imported: @triton.jit compiles
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
from test_precompile import _row_sum_kernel, _scale_kernel  # noqa: E402
from torchkiln_codegen_triton import TritonBackend, TritonOptions, compile_pool  # noqa: E402
from torchkiln_codegen_triton import precompile as P  # noqa: E402
from torchkiln_codegen_triton._compile_worker import TargetOnlyDriver  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402


def main() -> None:
    scenario, tmp = sys.argv[1], Path(sys.argv[2])
    os.environ["TRITON_CACHE_DIR"] = str(tmp / "triton-cache")
    driver.set_active(TargetOnlyDriver(GPUTarget("cuda", 90, 32)))
    P.compiles_binaries = lambda: True  # a throwaway process: plain assignment is enough
    torch.cuda.current_device = lambda: 0
    torch.cuda.device = lambda index: contextlib.nullcontext()
    compile_pool.MIN_JOBS_TO_START = 16 if scenario == "few" else 1
    compiles: list[tuple[str, bool]] = []
    knobs.compilation.listener = lambda src, cache_hit, **_: compiles.append((src.name, cache_hit))
    backend = TritonBackend(TritonOptions(compile_workers=0, cache_dir=str(tmp / "src")))
    kernels = backend.compile_kernels(
        [
            _scale_kernel(f"{scenario}_scale", 37, device="cuda"),
            _scale_kernel(f"{scenario}_half", 40, torch.bfloat16, device="cuda"),
            _row_sum_kernel(f"{scenario}_rows", 5, 19, device="cuda"),
        ]
    )
    out: dict = {}
    if scenario == "differ":
        real = P._worker_context

        def for_sm80():  # workers compile for another GPU, so under other cache keys
            cache_dir, env, _ = real()
            return cache_dir, env, ("cuda", 80, 32)

        P._worker_context = for_sm80
    if scenario == "few":
        P.start_workers(len(kernels), 2)
        out["started_early"] = compile_pool.pool_running()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out["precompiled"] = P.precompile(kernels, workers=2, processes=True)
    out["warnings"] = [str(w.message) for w in caught if w.category is RuntimeWarning]
    out["compiles"] = sorted(compiles)
    out["off"] = compile_pool.reason_off()
    out["pool_running"] = compile_pool.pool_running()
    out["stats"] = dict(compile_pool.stats)
    cache = tmp / "triton-cache"
    out["cache"] = (
        sorted(e.name for e in cache.iterdir() if any(e.glob("*.cubin"))) if cache.exists() else []
    )
    if scenario == "workers":
        # the binaries this process compiles itself, without workers, in a fresh cache
        compiles.clear()
        os.environ["TRITON_CACHE_DIR"] = str(tmp / "own-cache")
        for k in kernels:
            k._fn.device_caches.clear()  # forget the loaded binaries, keep the jit functions
        out["own_precompiled"] = P.precompile(kernels, workers=2, processes=False)
        out["own_compiles"] = sorted(compiles)
        out["own_cache"] = sorted(e.name for e in (tmp / "own-cache").iterdir())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
