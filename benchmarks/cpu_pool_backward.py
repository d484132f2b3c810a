"""CPU: max pooling's backward for ResNet's stem (8 x 64 x 112 x 112 float32, 3x3, stride 2,
padding 1), ATen's scatter against loop-ir's generated gather (``LoopIROptions(max_pool_backward=
"generated")``), contiguous and channels-last, in ms per call. The numbers behind the CPU's
default (ATen's kernel; lowering/pooling.py):

    python benchmarks/cpu_pool_backward.py [--batch 8] [--calls 10]
"""

from __future__ import annotations

import argparse
import time

import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_cpp import CppBackend

aten = torch.ops.aten
WINDOW = ([3, 3], [2, 2], [1, 1], [1, 1], False)


def _backward(g, x, i):
    return (aten.max_pool2d_with_indices_backward(g, x, *WINDOW, i),)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--calls", type=int, default=10)
    args = parser.parse_args()
    for channels_last in (False, True):
        x = torch.randn(args.batch, 64, 112, 112)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        values, indices = aten.max_pool2d_with_indices(x, *WINDOW[:3])
        inputs = (torch.randn_like(values), x, indices)
        gm = make_fx(_backward, decomposition_table=L.decompositions())(*inputs)
        options = L.LoopIROptions(max_pool_backward="generated")
        compiled = L.compile_graph(gm, list(inputs), CppBackend(), options)
        assert torch.equal(compiled(*inputs)[0], _backward(*inputs)[0])
        for name, fn in (("aten", _backward), ("generated", compiled)):
            fn(*inputs)
            start = time.perf_counter()
            for _ in range(args.calls):
                fn(*inputs)
            ms = (time.perf_counter() - start) / args.calls * 1e3
            layout = "channels-last" if channels_last else "contiguous"
            print(f"{layout:14s} {name:9s} {ms:8.2f} ms")


if __name__ == "__main__":
    main()
