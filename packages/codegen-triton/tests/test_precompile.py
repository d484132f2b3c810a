"""Parallel precompile: every kernel of a graph warmed up on a thread pool with the very
arguments of its first launch (so the launch finds that binary), and a no-op under the
interpreter, where kernels run exactly as before."""

from __future__ import annotations

import contextlib
import threading

import pytest
import sympy
import torch
from _fake_launch import Recorder, swap_jit_functions
from _specs import buf, column_reduction, spec
from torchkiln_codegen_triton import TritonBackend, TritonOptions
from torchkiln_codegen_triton import precompile as P
from torchkiln_codegen_triton._compat import interpreting
from torchkiln_loop_ir.backend import BufferSpec
from torchkiln_loop_ir.ops import ops


def _scale_kernel(name, n, dtype=torch.float32, device="cpu"):
    def body(x, r):
        ops.store("out", x[0], ops.mul(ops.load("a", x[0]), ops.constant(2.0, torch.float32)))

    return _on(
        spec(
            name,
            (n,),
            (),
            [("loop", [("out", body, False)])],
            [buf("a", dtype, (n,)), buf("out", dtype, (n,))],
            ["a"],
            ["out"],
        ),
        device,
    )


def _row_sum_kernel(name, n, m, device="cpu"):
    def body(x, r):
        v = ops.load("a", x[0] * m + r[0])
        ops.store_reduction("out", x[0], ops.reduction(torch.float32, torch.float32, "sum", v))

    return _on(
        spec(
            name,
            (n,),
            (m,),
            [("loop", [("out", body, True)])],
            [buf("a", torch.float32, (n, m)), buf("out", torch.float32, (n,))],
            ["a"],
            ["out"],
        ),
        device,
    )


def _on(k, device):
    """``k`` with every buffer on ``device`` (the kernel text does not depend on it)."""
    bufs = {
        name: BufferSpec(b.name, b.dtype, torch.device(device), b.size, b.stride, b.offset)
        for name, b in k.buffers.items()
    }
    return type(k)(
        k.name,
        k.xranges,
        k.rranges,
        k.stages,
        bufs,
        k.inputs,
        k.outputs,
        k.local_buffers,
        k.size_args,
    )


@pytest.mark.skipif(
    not interpreting(),
    reason="about the interpreter: with real Triton on a GPU precompile compiles binaries "
    "(the fake-GPU tests below cover that path)",
)
def test_precompile_is_a_no_op_under_the_interpreter_and_results_are_eager():
    kernels = TritonBackend().compile_kernels(
        [_scale_kernel("pc_scale", 37), _row_sum_kernel("pc_rows", 5, 19)]
    )
    assert not P.compiles_binaries()
    assert P.precompile(kernels) == 0
    a, out = torch.randn(37), torch.empty(37)
    kernels[0](a, out)
    torch.testing.assert_close(out, a * 2)
    b, rows = torch.randn(5, 19), torch.empty(5)
    kernels[1](b, rows)
    torch.testing.assert_close(rows, b.sum(1))


@pytest.fixture
def on_fake_gpu(monkeypatch):
    monkeypatch.setattr(P, "compiles_binaries", lambda: True)
    monkeypatch.setattr(P, "init_driver", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())


def _cuda_kernels():
    # compile_kernels would precompile them: build them with precompiling off, then swap in recorders
    backend = TritonBackend(TritonOptions(compile_workers=0))
    return backend.compile_kernels(
        [
            _scale_kernel("pcg_scale", 37, device="cuda"),
            _scale_kernel("pcg_half", 40, torch.bfloat16, device="cuda"),
            _row_sum_kernel("pcg_rows", 5, 19, device="cuda"),
        ]
    )


def test_every_kernel_is_warmed_on_a_pool_thread_with_its_launch_arguments(
    on_fake_gpu, monkeypatch
):
    monkeypatch.setattr(P, "async_compile_mode", lambda: None)  # Triton without AsyncCompileMode
    kernels = _cuda_kernels()
    barrier = threading.Barrier(len(kernels))
    recorders = [Recorder(barrier) for _ in kernels]
    for k, r in zip(kernels, recorders):
        k._fn = r
    assert P.precompile(kernels, workers=len(kernels)) == len(kernels)
    for r in recorders:
        assert len(r.warmups) == 1 and r.threads[0].startswith("torchkiln-triton-compile")
    # the first launch asks for the binary the warmup compiled: same dtypes, numels, blocks, warps
    inputs = [
        (torch.randn(37), torch.empty(37)),
        (torch.randn(40).bfloat16(), torch.empty(40, dtype=torch.bfloat16)),
        (torch.randn(5, 19), torch.empty(5)),
    ]
    for k, r, args in zip(kernels, recorders, inputs):
        k(*args)
        ((launch_args, launch_kwargs),) = r.launches
        ((warm_args, warm_kwargs),) = r.warmups
        as_warmed = tuple(a.dtype if isinstance(a, torch.Tensor) else a for a in launch_args)
        assert as_warmed == warm_args and launch_kwargs == warm_kwargs


def test_both_kernels_of_a_split_reduction_are_warmed_as_launched(on_fake_gpu, monkeypatch):
    monkeypatch.setattr(P, "async_compile_mode", lambda: None)
    rows, cols = 300, 37
    k = _on(column_reduction("pcg_split", rows, cols), "cuda")
    options = TritonOptions(compile_workers=0, split_programs=64, split_min_rchunk=16)
    (kernel,) = TritonBackend(options).compile_kernels([k])
    assert kernel.config.split >= 2
    first, finish = swap_jit_functions(kernel, Recorder)
    assert P.precompile([kernel], workers=1) == 1
    kernel(torch.randn(rows, cols), torch.empty(cols))
    for r in (first, finish):
        ((warm_args, warm_kwargs),) = r.warmups
        ((launch_args, launch_kwargs),) = r.launches
        as_warmed = tuple(a.dtype if isinstance(a, torch.Tensor) else a for a in launch_args)
        assert as_warmed == warm_args and launch_kwargs == warm_kwargs
    assert len(first.launches[0][1]["grid"]) == 2  # (x blocks, chunks)


def test_async_compile_mode_is_used_where_triton_has_it(on_fake_gpu):
    if P.async_compile_mode() is None:
        pytest.skip("this Triton has no AsyncCompileMode")  # the thread-pool path is tested above
    kernels = _cuda_kernels()
    recorders = [Recorder() for _ in kernels]
    for k, r in zip(kernels, recorders):
        k._fn = r
    assert P.precompile(kernels, workers=2) == len(kernels)
    assert all(r.modes[0] is not None for r in recorders)


def test_what_is_not_known_before_the_call_is_left_to_the_first_launch(on_fake_gpu):
    s0 = sympy.Symbol("s0", integer=True, positive=True)

    def body(x, r):
        ops.store("out", x[0], ops.load("a", x[0]))

    dynamic = _on(
        spec(
            "pcg_dyn",
            (s0,),
            (),
            [("loop", [("out", body, False)])],
            [buf("a", torch.float32, (s0,)), buf("out", torch.float32, (s0,))],
            ["a"],
            ["out"],
            size_args=(s0,),
        ),
        "cuda",
    )
    kernels = TritonBackend(TritonOptions(compile_workers=0)).compile_kernels(
        [dynamic, _scale_kernel("pcg_cpu", 8)]
    )
    assert [k.warmup_call() for k in kernels] == [None, None]  # symbolic sizes; a CPU kernel
    assert P.precompile(kernels) == 0
    assert (
        P.worker_count(300, None) >= 1 and P.worker_count(3, 64) == 3 and P.worker_count(5, 0) == 0
    )


class _JobPool:
    """A compile pool that records the jobs it is handed and answers each "ok" (no hashes to
    compare: the main process's warmup then neither confirms nor refutes the worker's)."""

    def __init__(self):
        self.jobs = []

    def run(self, jobs, parallel):
        self.jobs.extend(jobs)
        return ((i, ("ok", ["worker"])) for i in range(len(jobs)))


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "workers"])
def test_launch_sites_sharing_a_function_and_specialization_are_warmed_once(
    on_fake_gpu, monkeypatch, processes
):
    monkeypatch.setattr(P, "async_compile_mode", lambda: None)
    pool = _JobPool()
    if processes:  # the pool gets the distinct kernels only: one job each, none grouped again
        monkeypatch.setattr(P, "_worker_context", lambda: "context")
        monkeypatch.setattr(P, "_job_of", lambda k, context: {"kernel": k.name})
        monkeypatch.setattr(P.compile_pool, "pool_running", lambda: True)
        monkeypatch.setattr(P.compile_pool, "shared_pool", lambda size: pool)
    backend = TritonBackend(TritonOptions(compile_workers=0))
    # four launch sites of one text (sizes are parameters): 37 and 53 elements specialize alike
    # (neither divisible by 16, same blocks), 64 does not; and one other kernel
    kernels = backend.compile_kernels(
        [
            _scale_kernel("pcd_a", 37, device="cuda"),
            _scale_kernel("pcd_b", 37, device="cuda"),
            _scale_kernel("pcd_c", 53, device="cuda"),
            _scale_kernel("pcd_d", 64, device="cuda"),
            _row_sum_kernel("pcd_rows", 5, 19, device="cuda"),
        ]
    )
    scales, rows = kernels[:4], kernels[4]
    assert len({k.function_name for k in scales}) == 1
    assert all(k._fn is scales[0]._fn for k in scales)
    assert scales[0].config == scales[2].config  # so 37 and 53 compile one binary
    shared, other = Recorder(), Recorder()
    for k in scales:
        k._fn = shared  # still one function object for the four sites, as compiled
    rows._fn = other
    assert [k.warmup_key() for k in scales][:2] == [scales[0].warmup_key()] * 2
    assert scales[2].warmup_key() == scales[0].warmup_key() != scales[3].warmup_key()
    assert P.precompile(kernels, workers=2, processes=processes) == 3  # (37 | 53), 64, row sum
    assert len(shared.warmups) == 2 and len(other.warmups) == 1
    assert pool.jobs == (
        [{"kernel": k.name} for k in (scales[0], scales[3], rows)] if processes else []
    )
    # every site's first launch asks for one of the binaries warmed (Triton's own specialization
    # of the numels: divisible by 16 or not; the rest is equal)
    warmed = [(a, {k: v for k, v in kw.items() if k != "grid"}) for a, kw in shared.warmups]
    for k, n in zip(scales, (37, 37, 53, 64)):
        a, out = torch.randn(n), torch.empty(n)
        k(a, out)
        launch_args, launch_kwargs = shared.launches[-1]
        dtypes = tuple(x.dtype for x in launch_args[:2])
        assert any(
            dtypes == args[:2]
            and (launch_args[2] % 16 == 0) == (args[2] % 16 == 0)
            and {n: v for n, v in launch_kwargs.items() if n != "grid"} == kw
            for args, kw in warmed
        )
