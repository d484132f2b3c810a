"""Compiling a graph's Triton kernels in parallel, before its first call.

Triton compiles a ``@triton.jit`` function when it is first launched: a training step's few
hundred kernels then compile one after another inside the first call (most of torchkiln's compile
time on the GPU). ``precompile`` compiles them all right after code generation, on a pool of
threads bounded by ``os.cpu_count()`` (``TritonOptions.compile_workers``), through each kernel's
``JITFunction.warmup`` with the exact arguments of its first launch, so the launch finds its
binary in Triton's cache. Where Triton offers ``AsyncCompileMode`` (3.5 and later), the warmups
hand their compiles to the pool through it; otherwise each warmup runs on a pool thread.

Launch sites whose kernels share a function (``_naming.py``: the same text) and whose first
launches share a specialization compile one binary: each distinct ``warmup_key`` is warmed once.

Nothing changes what runs: the same source and specialization give the same binary, only earlier.
A kernel whose compile fails is left alone; its first launch compiles it again and reports the
error as before (a ``CodegenError`` naming the source). Under ``TRITON_INTERPRET=1`` or without
CUDA there is no binary to build, and this is a no-op.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from ._compat import async_compile_mode, init_driver, interpreting


def compiles_binaries() -> bool:
    """Whether kernels are compiled to GPU binaries here (not the interpreter, CUDA present)."""
    return not interpreting() and torch.cuda.is_available()


def worker_count(jobs: int, workers: int | None) -> int:
    """Threads for ``jobs`` compiles: ``workers`` (None: the CPU count), at most one per job."""
    limit = (os.cpu_count() or 1) if workers is None else workers
    return max(0, min(jobs, limit))


def precompile(kernels: Sequence[Any], workers: int | None = None) -> int:
    """Compile every kernel of ``kernels`` whose first launch is known (``warmup_call``) in
    parallel, and wait for them; returns how many distinct warmups ran (0: nothing to do)."""
    if not compiles_binaries():
        return 0
    ready = distinct_warmups(k for k in kernels if k.warmup_call() is not None)
    threads = worker_count(len(ready), workers)
    if threads < 1 or not ready:
        return 0
    init_driver()  # the driver is set up once, on this thread, before the pool shares it
    device = torch.cuda.current_device()
    # the current CUDA device is per thread: a pool thread compiles for the caller's device
    run_parallel([functools.partial(_on_device, device, k.warmup) for k in ready], threads)
    return len(ready)


def distinct_warmups(kernels: Iterable[Any]) -> list[Any]:
    """The first kernel of each ``warmup_key`` (a kernel without one counts as its own)."""
    first: dict[Any, Any] = {}
    for k in kernels:
        key = getattr(k, "warmup_key", lambda: None)()
        first.setdefault(("id", id(k)) if key is None else key, k)
    return list(first.values())


def _on_device(device: int, warmup: Callable[[], Any]) -> None:
    with torch.cuda.device(device):
        warmup()


def run_parallel(jobs: Sequence[Callable[[], Any]], threads: int) -> None:
    """Run ``jobs`` (warmups) on ``threads`` pool threads, waiting for all; errors are dropped."""
    mode = async_compile_mode()
    with ThreadPoolExecutor(
        max_workers=threads, thread_name_prefix="torchkiln-triton-compile"
    ) as pool:
        if mode is not None:
            try:
                with mode(pool, ignore_errors=True):
                    # each warmup only submits its compile; leaving the block waits for them all
                    for job in jobs:
                        _quietly(job)
                return
            except RuntimeError:  # another AsyncCompileMode is active (the caller's own)
                pass
        list(pool.map(_quietly, jobs))


def _quietly(job: Callable[[], Any]) -> None:
    try:
        job()
    except Exception:  # noqa: BLE001, S110 - the first launch compiles it again and reports the error
        pass
