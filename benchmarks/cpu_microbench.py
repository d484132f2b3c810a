"""CPU: eager vs torchkiln on single-kernel cases where the C++ code generator's loop nest
matters (short innermost loops, per-channel values, pooling with indices), one line each with
torchkiln's result checked against eager's.

    python benchmarks/cpu_microbench.py [--threads 2] [--rounds 30]

Session 31 (2 cores): a batch norm's training forward with ReLU over 32x256x14x14 went from
4.87 to 0.69 ms with the invariant values outside the innermost loop and the merged dims
(codegen-cpp 0.5.3, loop-ir 0.8.18); the batch norm's apply + ReLU + 2x2 max pool with indices
over 32x32x64x64 from 13.6 to 1.7 ms (the index from the maximum, loop-ir 0.8.18).
Session 32: GELU's backward with its bias gradient (``sum(0)``) over 1024x256, the backward of
BERT's feed-forward layer, as blocks of lanes (codegen-cpp 0.5.4's ``x_lanes``; 0 gives the
single x-loop): see the CHANGELOG for the figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
import torchkiln


def relu_add(x, y):
    return (x * 2 + y).relu()


def spatial_sum(x):
    return x.sum(dim=(2, 3))


def bn_stats(x):
    return torch.var_mean(x, dim=(0, 2, 3), correction=0)


def bn_train(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True).relu()


def bn_relu_pool_indices(x, m, s):
    y = ((x - m[:, None, None]) * s[:, None, None]).relu()
    return torch.ops.aten.max_pool2d_with_indices(y, [2, 2], [2, 2])


def gelu_backward_bias_grad(g, x):
    d = torch.ops.aten.gelu_backward(g, x)
    return d, d.sum(0)


CASES: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = [
    ("relu_add 64x512x7x7", relu_add, lambda: (torch.randn(64, 512, 7, 7),) * 2),
    ("spatial_sum 64x512x7x7", spatial_sum, lambda: (torch.randn(64, 512, 7, 7),)),
    ("bn_stats 64x256x14x14", bn_stats, lambda: (torch.randn(64, 256, 14, 14),)),
    (
        "bn_train 32x256x14x14",
        bn_train,
        lambda: (torch.randn(32, 256, 14, 14), torch.randn(256), torch.randn(256)),
    ),
    (
        "bn_relu_pool_indices 32x32x64x64",
        bn_relu_pool_indices,
        lambda: (torch.randn(32, 32, 64, 64), torch.randn(32), torch.rand(32)),
    ),
    (
        "gelu_backward_bias_grad 1024x256",
        gelu_backward_bias_grad,
        lambda: (torch.randn(1024, 256), torch.randn(1024, 256)),
    ),
]


def median_ms(fn: Callable[..., Any], args: tuple[torch.Tensor, ...], rounds: int) -> float:
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, fn, make in CASES:
            inputs = make()
            compiled = torchkiln.compile(fn, options={"strict": True})
            got, expected = compiled(*inputs), fn(*inputs)
            pairs = zip(
                torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(expected)
            )
            ok = all(torch.allclose(a, b, atol=1e-3, rtol=1e-3) for a, b in pairs)
            eager, kiln = (
                median_ms(fn, inputs, args.rounds),
                median_ms(compiled, inputs, args.rounds),
            )
            print(
                f"{name:34s} eager {eager:8.3f} ms  torchkiln {kiln:8.3f} ms  "
                f"{eager / kiln:5.2f}x  matches eager: {ok}"
            )


if __name__ == "__main__":
    main()
