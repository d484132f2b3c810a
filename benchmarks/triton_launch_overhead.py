"""Python time per launch of a compiled Triton kernel on the direct relaunch path, the GPU's own
launch replaced by a no-op (so it runs on the CPU, under TRITON_INTERPRET=1): what the wrapper
adds per kernel on top of Triton's launcher. Compares a call whose tensors are all 16-byte
aligned (the kept binary, no specialization key) with one through the keyed path.

    TRITON_INTERPRET=1 python benchmarks/triton_launch_overhead.py

It also times a wrapper call's ``stream_for`` against its form before session 45, the CUDA
getters replaced by stand-ins (the Python around them, no GPU figure).

On a GPU, ``--cuda`` times a wrapper call's ``stream_for`` (against its earlier form), then real
launches instead of the no-op: host microseconds per call of a small compiled
kernel (4 and 12 tensor arguments) through torchkiln's kernel object (a call, and ``launch_in``
with a stream as a generated wrapper launches it), through Triton's launcher
directly, and of an eager ``torch.add(out=)``, with the GPU's own time per kernel beside them (a
call whose host time exceeds its GPU time leaves the GPU idle).
"""

from __future__ import annotations

import functools
import time

import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend
from torchkiln_codegen_triton import wrapper as W


class _NoLaunch:
    packed_metadata = function = None

    def run(self, *args):
        pass


def per_launch_us(kernel, args, calls: int = 20000) -> float:
    for _ in range(1000):
        kernel(*args)
    start = time.perf_counter()
    for _ in range(calls):
        kernel(*args)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    gm = make_fx(lambda a, b: (a * b + 1).relu(), decomposition_table=L.decompositions())(a, b)
    kernel = L.compile_graph(gm, [a, b], TritonBackend()).kernels[0]
    W.fast_launcher = lambda: (lambda: 0, lambda device: 0)  # device 0, any stream
    kernel._cuda, kernel._device_index = True, None  # CPU tensors standing in for CUDA ones
    args = [torch.randn(64, 64) for _ in range(kernel._nargs)]
    numels = (4096,)
    kernel._launchers[(0, 0, *(W._specialization(x) for x in (*args, *numels)))] = _NoLaunch()
    ready = per_launch_us(kernel, args)
    keyed = per_launch_us(_Keyed(kernel), args)
    # as a generated wrapper launches it: the stream fetched once per wrapper call, not here
    stream_launch = per_launch_us(functools.partial(kernel.launch_in, 0), args)
    print(
        f"ready launch: {ready:.1f} us, keyed path: {keyed:.1f} us, launch_in with the "
        f"wrapper's stream: {stream_launch:.1f} us per launch"
    )
    stream_for_stand_ins()


class _Keyed:
    """The kernel with its ready launch dropped before every call: every launch builds its
    specialization key, as all launches did before the ready launch (the call builds it again)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, *args):
        self.kernel._ready = None
        self.kernel(*args)


def cuda_case(nargs: int) -> None:
    inputs = [torch.randn(1024, device="cuda") for _ in range(nargs - 1)]

    def chain(*xs):
        total = xs[0]
        for x in xs[1:]:
            total = total * 0.5 + x
        return total

    gm = make_fx(chain, decomposition_table=L.decompositions())(*inputs)
    kernel = L.compile_graph(gm, inputs, TritonBackend()).kernels[0]
    out = torch.empty(1024, device="cuda")
    args = [*inputs, out][: kernel._nargs]
    kernel(*args)
    torch.cuda.synchronize()
    ours = per_launch_us(kernel, args, calls=20000)
    torch.cuda.synchronize()
    # the binary Triton compiled, launched as the ready launch does (a pointwise kernel: the
    # numel, then XBLOCK, after the tensors)
    binary = next(iter(kernel._launchers.values()))
    gx, tail = -(-1024 // kernel.config.xblock), (1024, kernel.config.xblock)
    stream = torch.cuda.current_stream().cuda_stream

    def raw(*a):
        binary.run(
            gx, 1, 1, stream, binary.function, binary.packed_metadata, None, None, None, *a, *tail
        )

    direct = per_launch_us(raw, args, calls=20000)
    # as a generated wrapper launches it: the stream fetched once per wrapper call
    in_stream = kernel.stream_for(torch.device("cuda", torch.cuda.current_device()))
    assert in_stream is not None and "launch_in" in vars(kernel), "no ready launch was built"
    wrapper_launch = per_launch_us(
        functools.partial(kernel.launch_in, in_stream), args, calls=20000
    )
    a, b, c = inputs[0], inputs[1], torch.empty_like(inputs[0])
    eager = per_launch_us(lambda: torch.add(a, b, out=c), (), calls=20000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(2000):
        kernel(*args)
    end.record()
    end.synchronize()
    gpu = start.elapsed_time(end) * 1000 / 2000
    from torchkiln_codegen_triton._compat import direct_launch

    direct_c = direct_launch(binary.run)[0] is not binary.run
    print(
        f"{kernel._nargs} tensors (ready launch calls Triton's C launch directly: "
        f"{'yes' if direct_c else 'no'}): torchkiln kernel {ours:.1f} us, launch_in with the wrapper's "
        f"stream {wrapper_launch:.1f} us, Triton launcher "
        f"{direct:.1f} us, eager torch.add(out=) {eager:.1f} us per call on the host; "
        f"{gpu:.1f} us per call back to back on the GPU"
    )


def _earlier_fast_launcher():
    from torchkiln_codegen_triton._compat import _launch_api, has_hooks

    api = _launch_api()
    if api is None:
        return None
    runtime, get_device, get_stream = api
    if has_hooks(runtime.launch_enter_hook) or has_hooks(runtime.launch_exit_hook):
        return None
    return get_device, get_stream


def earlier_stream_for(device):
    """``stream_for`` before session 45: ``device.type`` read each call, then ``fast_launcher``
    with Triton's driver getters (``torch.cuda.current_device`` among them)."""
    if device.type != "cuda" or device.index is None:
        return None
    fast = _earlier_fast_launcher()
    if fast is None:
        return None
    index = fast[0]()
    return fast[1](index) if index == device.index else None


def stream_for_case() -> None:
    """A wrapper call's ``stream_for`` (once a call) against its earlier form, on the GPU."""
    device = torch.device("cuda", torch.cuda.current_device())
    expected = torch.cuda.current_stream().cuda_stream
    assert W.stream_for(device) == earlier_stream_for(device) == expected
    now = per_launch_us(W.stream_for, (device,), calls=100000)
    before = per_launch_us(earlier_stream_for, (device,), calls=100000)
    print(f"stream_for: {now:.2f} us a wrapper call (the earlier form {before:.2f} us)")


def stream_for_stand_ins() -> None:
    """The same two forms on a CPU, the CUDA getters replaced by stand-ins: C builtins for
    torch's (``stream_for``), and for Triton's driver ``torch.cuda.current_device``'s shape (a
    Python function calling a lazy-init check, then a builtin). What the Python
    around the getters costs; no GPU figure."""
    from torchkiln_codegen_triton import _compat
    from triton import knobs

    def lazy_init() -> None:  # torch.cuda._lazy_init once CUDA is up
        if torch.cuda.is_initialized() or hasattr(lazy_init, "initializing"):
            return

    def current_device() -> int:  # torch.cuda.current_device: the check, then the C getter
        lazy_init()
        return abs(0)

    saved = W.stream_api, _compat._launch_api
    W.stream_api = lambda: (knobs.runtime, int, abs)
    _compat._launch_api = lambda: (knobs.runtime, current_device, abs)
    try:
        device = torch.device("cuda", 0)
        assert W.stream_for(device) == earlier_stream_for(device) == 0
        now = per_launch_us(W.stream_for, (device,), calls=100000)
        before = per_launch_us(earlier_stream_for, (device,), calls=100000)
    finally:
        W.stream_api, _compat._launch_api = saved
    print(
        f"stream_for with stand-ins for the CUDA getters: {now:.2f} us (earlier form {before:.2f})"
    )


def cuda_main() -> None:
    stream_for_case()
    for nargs in (4, 12):
        cuda_case(nargs)


if __name__ == "__main__":
    import sys

    cuda_main() if "--cuda" in sys.argv else main()
