"""The direct relaunch path (CUDA only, faked here): the first call goes through Triton's
``fn.run`` and keeps the compiled kernel; later calls hand ``kernel.run`` the same grid,
parameters and constexprs. A split reduction relaunches both of its kernels that way."""

import types

import pytest
import torch
from _fake_launch import FakeFn, described, swap_jit_functions
from _specs import column_reduction, compile_one
from torchkiln_codegen_triton import TritonOptions
from torchkiln_codegen_triton import wrapper as W

#: a sum over 300 rows: one kernel, or split into partial sums and a finishing kernel
SPLIT = TritonOptions(split_programs=64, split_min_rchunk=16)
UNSPLIT = TritonOptions(split_max_chunks=0)


def _sum_kernel(rows, cols, options):
    return compile_one(column_reduction("fl_sum", rows, cols), options)


def _on_fake_cuda(monkeypatch, split, current=lambda: 0, stream=lambda device: "stream"):
    """The column sum of a (300, 37) tensor, split or not, taking the CUDA launch path on CPU
    tensors: ``fast_launcher`` faked (``current`` device, its ``stream``), the kernel's JIT
    functions ``FakeFn``s (returned, in launch order)."""
    monkeypatch.setattr(W, "fast_launcher", lambda: (current, stream))
    k = _sum_kernel(300, 37, SPLIT if split else UNSPLIT)
    assert (k.config.split >= 2) == split
    fns = swap_jit_functions(k, FakeFn)
    k._cuda, k._device_index = True, None  # CPU tensors standing in for CUDA ones
    return k, fns


@pytest.mark.parametrize("split", [False, True])
def test_relaunch_passes_what_triton_was_first_given(monkeypatch, split):
    k, fns = _on_fake_cuda(monkeypatch, split)
    a, out = torch.randn(300, 37), torch.empty(37)
    k(a, out)
    k(a, out)
    for fn in fns:
        ((params, grid, num_warps, consts),) = fn.calls
        (run,) = fn.compiled.runs
        assert run[:3] == (*grid, 1, 1)[:3] and run[3:9] == (
            "stream",
            "function",
            "metadata",
            None,
            None,
            None,
        )
        assert described(run[9:]) == described((*params, *consts.values()))
        assert list(consts) == ["XBLOCK", "RBLOCK"]
    if split:
        first_grid = fns[0].calls[0][1]
        assert len(first_grid) == 2 and first_grid[1] >= 2  # (x blocks, chunks)
        parts = [p for p in fns[0].calls[0][0] if isinstance(p, torch.Tensor)][2:]
        assert [(p.dtype, p.shape[1]) for p in parts] == [(torch.float32, 37)]


def test_aligned_calls_skip_the_specialization_key(monkeypatch):
    """A kernel of static sizes whose tensors are all 16-byte aligned relaunches the binary kept
    for that case with exactly what the keyed path hands it; a misaligned tensor (a view at an
    odd offset) goes back to the keyed path, where Triton specializes on alignment."""
    k, (fn,) = _on_fake_cuda(monkeypatch, split=False)
    a, out = torch.randn(300, 37), torch.empty(37)
    for _ in range(3):
        k(a, out)
    assert len(fn.calls) == 1 and len(fn.compiled.runs) == 2 and k._ready
    assert described(fn.compiled.runs[0]) == described(fn.compiled.runs[1])
    keyed = k._launchers
    misaligned = torch.randn(300 * 37 + 1)[1:].view(300, 37)
    assert misaligned.data_ptr() % 16
    k(misaligned, out)
    assert len(fn.calls) == 2 and len(keyed) == 2  # a second specialization, compiled by Triton


@pytest.mark.parametrize("split", [False, True])
def test_ready_launch_repeats_the_keyed_launch(monkeypatch, split):
    """From the third call on, a static kernel whose tensors are aligned launches through its
    ready closure: the same binary, grid and parameters as the keyed path handed it (a split
    reduction: fresh partials each call); the result equals eager's. A call on another device
    or with a misaligned tensor takes the general path again."""
    device = [0]
    k, fns = _on_fake_cuda(monkeypatch, split, lambda: device[0], lambda d: f"stream{d}")
    a, out = torch.randn(300, 37), torch.empty(37)
    for _ in range(4):
        k(a, out)
    assert k._ready is not None and k._ready[0] == 0
    for fn in fns:
        assert len(fn.calls) == 1 and len(fn.compiled.runs) == 3
        first, *later = fn.compiled.runs
        assert all(described(r) == described(first) for r in later)
        assert all(r[3] == "stream0" for r in later)
    if split:  # fresh partials per call, never the first call's
        parts = [r[9 + 2] for r in fns[0].compiled.runs]
        assert len({id(p) for p in parts}) == len(parts)  # all alive: distinct objects
    device[0] = 1
    k(a, out)
    assert all(len(fn.calls) == 2 for fn in fns)  # a new device: Triton's own launch again


def test_ready_kernel_matches_eager_under_the_interpreter():
    """The lean path is CUDA-only; on the CPU the general path still computes the sum."""
    k = _sum_kernel(300, 37, SPLIT)
    a, out = torch.randn(300, 37), torch.empty(37)
    for _ in range(3):
        k(a, out)
        torch.testing.assert_close(out, a.sum(0), rtol=1e-5, atol=1e-4)
    if a.device.type == "cpu":  # the GPU smoke run makes CUDA the default device: lean there
        assert k._ready is None


def test_stream_for_only_the_current_device_with_no_hook(monkeypatch):
    """The stream a wrapper hands its kernels for one call: the current one of the graph's
    device; None on another current device, for a CPU device, while a launch hook is installed
    (a HookChain with calls, or an older Triton's hook function), or with another Triton
    (``stream_api`` None)."""
    current = [0]

    class Chain:  # Triton >= 3.5's HookChain: empty ``calls`` when no hook is installed
        def __init__(self):
            self.calls = []

    runtime = types.SimpleNamespace(launch_enter_hook=Chain(), launch_exit_hook=Chain())
    monkeypatch.setattr(W, "stream_api", lambda: (runtime, lambda: current[0], "stream{}".format))
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 0)) == "stream0"
    current[0] = 1
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 0)) is None
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 1)) == "stream1"
    assert W.TritonCompiledKernel.stream_for(torch.device("cpu")) is None
    runtime.launch_exit_hook.calls.append(print)
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 1)) is None
    runtime.launch_exit_hook, runtime.launch_enter_hook = None, print  # Triton 3.4's form
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 1)) is None
    runtime.launch_enter_hook = None
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 1)) == "stream1"
    monkeypatch.setattr(W, "stream_api", lambda: None)
    assert W.TritonCompiledKernel.stream_for(torch.device("cuda", 1)) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's CUDA getters need a GPU")
def test_stream_api_getters_are_torchs_current_device_and_stream():
    """``stream_api``'s getters, torch's C functions called directly, answer what
    ``torch.cuda.current_device`` and the current stream do (Triton's driver's own getters)."""
    from torchkiln_codegen_triton import _compat

    api = _compat.stream_api()
    assert api is not None
    _, get_device, get_stream = api
    assert get_device() == torch.cuda.current_device()
    assert get_stream(get_device()) == torch.cuda.current_stream().cuda_stream
    with torch.cuda.stream(torch.cuda.Stream()):
        assert get_stream(get_device()) == torch.cuda.current_stream().cuda_stream
    device = torch.device("cuda", torch.cuda.current_device())
    assert W.stream_for(device) == torch.cuda.current_stream().cuda_stream


@pytest.mark.parametrize("split", [False, True])
def test_launch_in_is_the_ready_launch_once_built(monkeypatch, split):
    """``launch_in(stream, *tensors)``: the general call until the ready launch exists, then the
    ready closure itself (the instance attribute), handing Triton's launcher the wrapper's
    stream and what the keyed path handed it; with no stream, the general call (which checks
    device and alignment itself: a misaligned tensor goes to the keyed path)."""
    k, fns = _on_fake_cuda(monkeypatch, split, stream=lambda d: "current")
    a, out = torch.randn(300, 37), torch.empty(37)
    assert "launch_in" not in vars(k)
    k.launch_in("wrapper", a, out)  # Triton's own launch, keeping the binary
    k.launch_in("wrapper", a, out)  # the keyed relaunch, which builds the ready launch
    assert vars(k)["launch_in"] is k._ready[1]
    k.launch_in("wrapper", a, out)
    k.launch_in(None, a, out)
    for fn in fns:
        assert len(fn.calls) == 1
        keyed, ready, general = fn.compiled.runs  # the first launch was Triton's own (fn.run)
        assert [r[3] for r in (keyed, ready, general)] == ["current", "wrapper", "current"]
        assert all(described(r[4:]) == described(keyed[4:]) for r in (ready, general))
    misaligned = torch.randn(300 * 37 + 1)[1:].view(300, 37)
    k.launch_in(None, misaligned, out)
    assert len(fns[0].calls) == 2  # a new specialization: Triton compiles and launches it


class CudaLauncher:
    """Triton 3.6's launcher as its ``__call__`` behaves for a kernel needing no scratch: the C
    ``launch`` gets the grid, stream and function, the cooperative-grid and PDL flags, the
    two scratch pointers (None), then what followed ``function``."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self):
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)

    def __call__(self, gx, gy, gz, stream, function, *rest):
        self.launch(
            gx,
            gy,
            gz,
            stream,
            function,
            self.launch_cooperative_grid,
            self.launch_pdl,
            None,
            None,
            *rest,
        )


def test_direct_launch_hands_the_c_launcher_what_triton_36_would(monkeypatch):
    from torchkiln_codegen_triton import _compat

    launcher = CudaLauncher()
    monkeypatch.setattr(_compat, "TRITON_VERSION", (3, 6))
    call = (7, 1, 1, "stream", "function", "meta", None, None, None, "t0", "t1", 37, 64)
    launcher(*call)
    launch, extra = _compat.direct_launch(launcher)
    assert launch == launcher.launch
    launch(*call[:5], *extra, *call[5:])
    assert launcher.calls[0] == launcher.calls[1]
    launcher.global_scratch_size = 128  # a kernel needing scratch: Triton allocates it
    assert _compat.direct_launch(launcher) == (launcher, ())
    launcher.global_scratch_size = 0
    monkeypatch.setattr(_compat, "TRITON_VERSION", (3, 9))  # another C signature
    assert _compat.direct_launch(launcher) == (launcher, ())


def test_ready_launch_calls_the_c_launcher_on_triton_36(monkeypatch):
    """With a 3.6 launcher, the ready launch's call of the C function equals what the launcher
    itself passes it on the keyed path; the result on the interpreter is checked elsewhere."""
    from torchkiln_codegen_triton import _compat

    monkeypatch.setattr(_compat, "TRITON_VERSION", (3, 6))
    k, (fn,) = _on_fake_cuda(monkeypatch, split=False)
    launcher = CudaLauncher()
    fn.compiled.run = launcher  # the compiled kernel's ``run``, as Triton's CompiledKernel has
    a, out = torch.randn(300, 37), torch.empty(37)
    k(a, out)  # Triton's own launch
    k(a, out)  # keyed: through the launcher's __call__
    k.launch_in("stream", a, out)  # ready: the C launch directly
    keyed, ready = launcher.calls
    assert described(keyed) == described(ready)
    assert ready[5:9] == (False, True, None, None)
