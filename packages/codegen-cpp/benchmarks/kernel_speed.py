"""Eager torch vs the generated C++ kernel, on a few typical graphs (CPU).

    python packages/codegen-cpp/benchmarks/kernel_speed.py [--runs N]

Each case is compiled through loop-ir's ``compile_graph`` with ``CppBackend``; eager and compiled
calls are interleaved and the medians of ``--runs`` calls are printed (times in microseconds), plus
the per-call overhead of one ``CppCompiledKernel`` on tiny tensors. Ratios (eager / compiled) are
what counts: absolute times move with the machine's load.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torchkiln_loop_ir
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_cpp import CppBackend


def _compile(fn, inputs):
    gm = make_fx(fn, decomposition_table=torchkiln_loop_ir.decompositions())(*inputs)
    return torchkiln_loop_ir.compile_graph(gm, list(inputs), backend=CppBackend())


def _ln(x, w, b):
    return (torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b),)


CASES = {
    "pointwise chain 1M": (
        lambda x, y: (torch.sigmoid(x * 2 + y).relu() - y,),
        lambda: (torch.randn(1 << 20), torch.randn(1 << 20)),
    ),
    "softmax 256x1024": (lambda x: (torch.softmax(x, -1),), lambda: (torch.randn(256, 1024),)),
    "sigmoid 1M": (lambda x: (torch.sigmoid(x),), lambda: (torch.randn(1 << 20),)),
    "silu 1M": (lambda x: (torch.nn.functional.silu(x),), lambda: (torch.randn(1 << 20),)),
    "gelu (erf) 1M": (lambda x: (torch.nn.functional.gelu(x),), lambda: (torch.randn(1 << 20),)),
    "gelu (tanh) 1M": (
        lambda x: (torch.nn.functional.gelu(x, approximate="tanh"),),
        lambda: (torch.randn(1 << 20),),
    ),
    "log_softmax 256x1024": (
        lambda x: (torch.log_softmax(x, -1),),
        lambda: (torch.randn(256, 1024),),
    ),
    "layer_norm 512x768": (
        _ln,
        lambda: (torch.randn(512, 768), torch.randn(768), torch.randn(768)),
    ),
    "sum dim0 1024x1024": (lambda x: (x.sum(0),), lambda: (torch.randn(1024, 1024),)),
    "amax dim-1 1024x1024": (lambda x: (x.amax(-1),), lambda: (torch.randn(1024, 1024),)),
    "argmax dim-1 1024x1024": (lambda x: (x.argmax(-1),), lambda: (torch.randn(1024, 1024),)),
    "amax full 1M": (lambda x: (x.amax(),), lambda: (torch.randn(1 << 20),)),
    "add 16 floats (overhead)": (lambda x, y: (x + y,), lambda: (torch.randn(16), torch.randn(16))),
}


def _median_us(samples):
    return statistics.median(samples) * 1e6


def bench_case(fn, make_inputs, runs):
    inputs = make_inputs()
    cg = _compile(fn, inputs)
    for g, e in zip(cg(*inputs), fn(*inputs)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
    for _ in range(5):
        fn(*inputs), cg(*inputs)
    te, tc = [], []
    clock = time.perf_counter
    for _ in range(runs):
        t0 = clock()
        fn(*inputs)
        t1 = clock()
        cg(*inputs)
        t2 = clock()
        te.append(t1 - t0)
        tc.append(t2 - t1)
    return _median_us(te), _median_us(tc)


def kernel_call_overhead(runs):
    """µs per direct call of one CppCompiledKernel on 16-float tensors."""
    x, y = torch.randn(16), torch.randn(16)
    cg = _compile(lambda a, b: (a + b,), (x, y))
    (k,) = cg.kernels
    out = torch.empty(16)
    for _ in range(100):
        k(x, y, out)
    samples = []
    for _ in range(max(runs // 10, 20)):
        t0 = time.perf_counter()
        for _ in range(100):
            k(x, y, out)
        samples.append((time.perf_counter() - t0) / 100)
    torch.testing.assert_close(out, x + y)
    return _median_us(samples)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("-k", default="", help="only cases whose name contains this")
    args = p.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, medians of {args.runs}")
    print(f"{'case':28s} {'eager us':>10s} {'cpp us':>10s} {'eager/cpp':>10s}")
    for name, (fn, make_inputs) in CASES.items():
        if args.k not in name:
            continue
        e, c = bench_case(fn, make_inputs, args.runs)
        print(f"{name:28s} {e:10.1f} {c:10.1f} {e / c:10.2f}")
    if args.k in "kernel call":
        print(f"{'kernel call, 16 floats':28s} {'':10s} {kernel_call_overhead(args.runs):10.2f}")


if __name__ == "__main__":
    main()
