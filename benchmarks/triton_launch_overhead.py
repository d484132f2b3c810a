"""Python time per launch of a compiled Triton kernel on the direct relaunch path, the GPU's own
launch replaced by a no-op (so it runs on the CPU, under TRITON_INTERPRET=1): what the wrapper
adds per kernel on top of Triton's launcher. Compares a call whose tensors are all 16-byte
aligned (the kept binary, no specialization key) with one through the keyed path.

    TRITON_INTERPRET=1 python benchmarks/triton_launch_overhead.py
"""

from __future__ import annotations

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
    aligned = per_launch_us(kernel, args)
    keyed = per_launch_us(_Keyed(kernel), args)
    print(f"aligned relaunch: {aligned:.1f} us per launch; keyed path: {keyed:.1f} us per launch")

class _Keyed:
    """The kernel with its aligned-call table emptied before every call: every launch builds its
    specialization key, as all launches did before the table (it also refills the table)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __call__(self, *args):
        self.kernel._aligned.clear()
        self.kernel(*args)


if __name__ == "__main__":
    main()
