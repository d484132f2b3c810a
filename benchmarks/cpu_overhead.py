"""Python overhead of a compiled CPU call, layer by layer, on tiny inputs (issue 17).

    OMP_NUM_THREADS=1 python benchmarks/cpu_overhead.py [--calls 20000] [--repeat 7] [--json PATH]

A chain of K softmaxes over alternately transposed 8x8 matrices compiles to K C++ kernels (each
transposed read stops fusion) and nothing else. Each layer is timed alone, in the calling
thread's CPU time (time.thread_time: on a shared machine, waiting for a core is not counted),
as the median over ``--repeat`` samples of ``--calls`` back-to-back calls:

- ``ctypes``: the kernel's foreign function called with prebuilt integer arguments (the floor);
- ``launch``: the kernel's launcher (``kernel(t0, t1)``: data_ptr() per tensor, then ctypes);
- ``wrapper K``: loop-ir's generated wrapper for the K-kernel graph (allocations + launches);
- ``compiled K``: ``torchkiln.compile(f)(x)``: guards, the aot runtime, the wrapper;
- ``eager K``: ``f(x)``.

Derived: the Python cost per kernel launch (``launch - ctypes``, and the wrapper's slope
``(wrapper K - wrapper 1) / (K - 1)``, which includes the output allocation), and the cost per
compiled call outside the wrapper (``compiled 1 - wrapper 1``). Issue 17's target: under 5 us per
kernel launch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torchkiln
import torchkiln_codegen_cpp as cpp
import torchkiln_loop_ir as loop_ir
from torch.fx.experimental.proxy_tensor import make_fx


def chain(k: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def f(x: torch.Tensor) -> torch.Tensor:
        for _ in range(k):
            x = torch.softmax(x.t(), -1)
        return x

    return f


def per_call_us(fn: Callable[[], Any], calls: int, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.thread_time()
        for _ in range(calls):
            fn()
        samples.append((time.thread_time() - start) * 1e6 / calls)
    return statistics.median(samples)


def measure(calls: int, repeat: int, k: int = 8) -> dict[str, float]:
    x = torch.randn(8, 8)
    out: dict[str, float] = {}
    graphs = {}
    for n in (1, k):
        f = chain(n)
        gm = make_fx(f, decomposition_table=loop_ir.decompositions())(x)
        cg = loop_ir.compile_graph(gm, [x], cpp.CppBackend())
        assert cg.num_kernels == n and not cg.extern_calls, (cg.num_kernels, cg.extern_calls)
        torch.testing.assert_close(cg(x)[0], f(x))
        graphs[n] = cg
        compiled = torchkiln.compile(f)
        torch.testing.assert_close(compiled(x), f(x))
        args = [x]
        out[f"wrapper {n}"] = per_call_us(lambda cg=cg, args=args: cg._call(args), calls, repeat)
        out[f"compiled {n}"] = per_call_us(lambda c=compiled: c(x), calls, repeat)
        out[f"eager {n}"] = per_call_us(lambda f=f: f(x), calls, repeat)
    kernel = graphs[1].kernels[0]
    y = torch.empty(8, 8)
    fn, px, py = kernel._fn, x.data_ptr(), y.data_ptr()
    out["ctypes"] = per_call_us(lambda: fn(px, py), calls, repeat)
    out["launch"] = per_call_us(lambda: kernel(x, y), calls, repeat)
    out["python per launch"] = out["launch"] - out["ctypes"]
    out["wrapper per kernel"] = (out[f"wrapper {k}"] - out["wrapper 1"]) / (k - 1)
    out["outside the wrapper"] = out["compiled 1"] - out["wrapper 1"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--kernels", type=int, default=8)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    result = measure(args.calls, args.repeat, args.kernels)
    for name, us in result.items():
        print(f"{name:24s} {us:8.2f} us")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
