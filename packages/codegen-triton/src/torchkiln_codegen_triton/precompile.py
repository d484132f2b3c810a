"""Compiling a graph's Triton kernels in parallel, before its first call.

Triton compiles a ``@triton.jit`` function when it is first launched: a training step's few
hundred kernels then compile one after another inside the first call (most of torchkiln's compile
time on the GPU). ``precompile`` compiles them all right after code generation, on a pool of
threads bounded by ``os.cpu_count()`` (``TritonOptions.compile_workers``), through each kernel's
``JITFunction.warmup`` with the exact arguments of its first launch, so the launch finds its
binary in Triton's cache. Where Triton offers ``AsyncCompileMode`` (3.5 and later), the warmups
hand their compiles to the pool through it; otherwise each warmup runs on a pool thread.

Launch sites whose kernels share a function (``_naming.py``: the same text) and whose first
launches share a specialization compile one binary: each distinct ``warmup_key`` is warmed once
(``distinct_warmups``, the one place that decides it); the other sites share that function, so
their launches find the binary. Threads and worker processes alike get only the distinct kernels.

With ``TritonOptions.compile_in_processes`` (the default), the compiles themselves run in a pool
of worker processes first (``compile_pool.py``): Triton's front end holds the GIL, so threads
barely overlap, processes do. Each worker fills Triton's on-disk cache for the current GPU target
with the same cache key the main process computes; the main process then warms each kernel as
its worker finishes, a cache hit. Should its binary's hash differ from the worker's (a cache key
the workers cannot reproduce), worker processes are turned off for the process with a warning and
the rest is warmed on threads as before; a kernel whose worker failed is too.

Nothing changes what runs: the same source and specialization give the same binary, only earlier.
A kernel whose compile fails is left alone; its first launch compiles it again and reports the
error as before (a ``CodegenError`` naming the source). Under ``TRITON_INTERPRET=1`` or without
CUDA there is no binary to build, and this is a no-op.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from . import compile_pool
from ._compat import async_compile_mode, init_driver, interpreting


def compiles_binaries() -> bool:
    """Whether kernels are compiled to GPU binaries here (not the interpreter, CUDA present)."""
    return not interpreting() and torch.cuda.is_available()


def worker_count(jobs: int, workers: int | None) -> int:
    """Threads for ``jobs`` compiles: ``workers`` (None: the CPU count), at most one per job."""
    limit = (os.cpu_count() or 1) if workers is None else workers
    return max(0, min(jobs, limit))


def precompile(kernels: Sequence[Any], workers: int | None = None, processes: bool = False) -> int:
    """Compile every kernel of ``kernels`` whose first launch is known (``warmup_call``) in
    parallel, and wait for them; returns how many distinct warmups ran (0: nothing to do).
    ``processes``: compile in worker processes first (``in_processes``), threads after."""
    if not compiles_binaries():
        return 0
    ready = distinct_warmups(k for k in kernels if k.warmup_call() is not None)
    threads = worker_count(len(ready), workers)
    if threads < 1 or not ready:
        return 0
    init_driver()  # the driver is set up once, on this thread, before the pool shares it
    device = torch.cuda.current_device()
    left = _through_workers(ready, workers, threads) if processes else ready
    # the current CUDA device is per thread: a pool thread compiles for the caller's device
    run_parallel([functools.partial(_on_device, device, k.warmup) for k in left], threads)
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


def start_workers(kernels: int, workers: int | None) -> None:
    """Start this process's compile workers now if a graph of ``kernels`` kernels will use them
    (their imports then overlap its code generation); no-op when they run already or cannot."""
    if kernels >= compile_pool.MIN_JOBS_TO_START and compiles_binaries():
        if not compile_pool.pool_running() and compile_pool.reason_off() is None:
            compile_pool.shared_pool(pool_size(workers))


def pool_size(workers: int | None) -> int:
    """Worker processes of the pool (when it starts): ``workers``, else the CPU count."""
    return (os.cpu_count() or 1) if workers is None else workers


def _through_workers(kernels: Sequence[Any], workers: int | None, threads: int) -> list[Any]:
    """``in_processes``, or every kernel (for threads) should the pool itself fail: then worker
    processes are turned off for the process, with a warning."""
    try:
        return in_processes(kernels, pool_size(workers), threads)
    except Exception as e:  # noqa: BLE001 - workers only save time: never fail a compile for them
        reason = f"compile workers failed: {type(e).__name__}: {e}".splitlines()[0]
        compile_pool.turn_off(reason)
        warnings.warn(f"torchkiln: {reason}; compiling on threads", RuntimeWarning, stacklevel=3)
        return list(kernels)


def in_processes(kernels: Sequence[Any], size: int, parallel: int) -> list[Any]:
    """Compile ``kernels`` in the worker processes (a pool of ``size``, started on first use;
    at most ``parallel`` busy at once) and warm each here as its worker finishes (then a cache
    hit); returns the kernels still to compile here: those no worker compiled, and all the rest
    once a hash shows that the workers' cache keys differ from this process's. ``kernels`` are
    distinct already (``distinct_warmups``): each is one job."""
    context = _worker_context()
    jobs: list[tuple[dict[str, Any], Any]] = []
    for k in kernels:
        job = _job_of(k, context)
        if job is not None:
            jobs.append((job, k))
    running = compile_pool.pool_running()
    if context is None or not jobs or (not running and len(jobs) < compile_pool.MIN_JOBS_TO_START):
        return list(kernels)
    pool = compile_pool.shared_pool(size)
    if pool is None:
        return list(kernels)
    warmed: set[int] = set()
    replies = pool.run([job for job, _ in jobs], parallel)
    try:
        for index, reply in replies:
            if reply is None or reply[0] != "ok":
                continue  # compiled here below, with its error reported at the launch as before
            k = jobs[index][1]
            warmed.add(id(k))
            same = _same_binaries(k, reply[1])
            if same is False:
                compile_pool.stats["differed"] += 1
                _keys_differ(k)
                break
            compile_pool.stats["found"] += int(same is True)
    finally:
        replies.close()
    return [k for k in kernels if id(k) not in warmed]


def _same_binaries(kernel: Any, hashes: list[str | None]) -> bool | None:
    """Warm ``kernel`` here; whether its binaries are the ones its worker compiled (their cache
    hashes, i.e. keys, equal), None when that is not known (a failed warmup, a future)."""
    try:
        compiled = kernel.warmup()
    except Exception:  # noqa: BLE001 - its first launch compiles it again and reports the error
        return None
    mine = [getattr(c, "hash", None) for c in compiled]
    if len(mine) != len(hashes) or not all(isinstance(h, str) for h in (*mine, *hashes)):
        return None
    return mine == hashes


def _keys_differ(kernel: Any) -> None:
    reason = (
        f"kernel {kernel.name}: a compile worker's Triton cache key differs from this process's"
    )
    compile_pool.turn_off(reason)
    warnings.warn(
        f"torchkiln: {reason}; compiling on threads from now on (no effect on results)",
        RuntimeWarning,
        stacklevel=3,
    )


def _worker_context() -> tuple[str, dict[str, str], tuple[str, Any, int]] | None:
    """What a worker must share with this process for equal cache keys: the cache directory,
    the cache-invalidating environment, the GPU target; None when workers cannot share the cache
    (a cache manager other than Triton's file cache) or this Triton lacks what they rely on."""
    try:
        from triton import knobs
        from triton.runtime.cache import FileCacheManager
        from triton.runtime.driver import driver

        from ._compile_worker import invalidating_env

        manager = knobs.cache.manager_class or FileCacheManager  # None: the default
        if manager is not FileCacheManager or not hasattr(driver, "set_active"):
            return None
        target = driver.active.get_current_target()
        return (
            str(knobs.cache.dir),
            invalidating_env(),
            (target.backend, target.arch, target.warp_size),
        )
    except Exception:  # noqa: BLE001 - an older or newer Triton: threads, as before
        return None


def _job_of(kernel: Any, context: Any) -> dict[str, Any] | None:
    """A worker's job for ``kernel``: its module file and warmup calls; None when its functions
    are not plain ``@triton.jit`` functions of one module file."""
    try:
        calls = kernel.warmup_calls()
        fns = [fn for fn, _, _ in calls]
        module = {fn.__module__ for fn in fns}
        path = {fn.fn.__code__.co_filename for fn in fns}
        if not calls or len(module) != 1 or len(path) != 1:
            return None
        return {
            "context": context,
            "module": module.pop(),
            "path": path.pop(),
            "calls": [(fn.__name__, args, kwargs) for fn, args, kwargs in calls],
        }
    except AttributeError:
        return None
