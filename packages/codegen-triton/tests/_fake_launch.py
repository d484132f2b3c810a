"""Stand-ins for Triton's JIT functions, so the CUDA launch paths (direct relaunch, precompile)
run on CPU tensors: each records what Triton would have been handed."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch


class Compiled:
    """A compiled kernel as ``fn.run`` returns it: its ``run`` records each direct relaunch."""

    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.runs = []

    def run(self, *args):
        self.runs.append(args)


class FakeFn:
    """A JITFunction's ``run``: records the call and returns one ``Compiled`` kernel."""

    def __init__(self):
        self.calls, self.compiled = [], Compiled()

    def run(self, *params, grid, warmup, num_warps, **consts):
        assert warmup is False
        self.calls.append((params, grid, num_warps, consts))
        return self.compiled


class Recorder:
    """A JITFunction's ``warmup``, ``fn[grid](...)`` and ``fn.run(...)``: records warmups (and on
    which thread) and launches. On CPU tensors the wrapper launches with ``fn[grid](...)``; on
    CUDA tensors (the suite run on a GPU, ``benchmarks/gpu_triton_smoke.py``) its direct launch
    path calls ``fn.run(..., grid=, warmup=False, ...)`` (``wrapper._run_fast``): both record the
    same launch."""

    def __init__(self, barrier=None):
        self.warmups, self.launches, self.threads, self.modes = [], [], [], []
        self.barrier = barrier

    def warmup(self, *args, grid, **kwargs):
        from triton.runtime import _async_compile

        self.threads.append(threading.current_thread().name)
        self.modes.append(_async_compile.active_mode.get())
        if self.barrier is not None:
            self.barrier.wait(timeout=10)  # every kernel's warmup at once: they run in parallel
        self.warmups.append((args, {"grid": grid, **kwargs}))

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((args, {"grid": grid, **kwargs}))

        return launch

    def run(self, *args, grid, warmup, **kwargs):
        """The direct launch path's first launch of a specialization: recorded as ``fn[grid]``
        records it. Returns no compiled kernel, so the wrapper keeps none to relaunch and every
        launch comes back here."""
        assert warmup is False
        self.launches.append((args, {"grid": grid, **kwargs}))


def swap_jit_functions(kernel: Any, make: Callable[[], Any]) -> list[Any]:
    """Replace the compiled kernel's JIT function (and a split reduction's finishing one) by
    ``make()`` each; the fakes, in launch order."""
    fakes = [make()]
    kernel._fn = fakes[0]
    if kernel._finish is not None:
        fakes.append(make())
        kernel._finish = fakes[1]
    return fakes


def described(values) -> tuple:
    """Launch arguments with tensors as (dtype, shape): what must match between two launches."""
    return tuple((a.dtype, tuple(a.shape)) if isinstance(a, torch.Tensor) else a for a in values)
