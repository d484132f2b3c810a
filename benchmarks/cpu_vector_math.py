"""codegen-cpp's float math on the CPU: whether a value computed twice agrees with itself, what
the kernels cost, and what a library's compile costs.

Printed:
- the sizes (9 to 198 elements) where ``(cos(x) == cos(x).amin()).sum()`` compiled finds no
  element equal to its minimum (eager finds one): codegen-cpp 0.5.5 computed the minimum in a
  vector lane and the comparison in a loop's scalar tail, 0x1.b8b64cp-2 against 0x1.b8b64ap-2;
- each case's time a call, the best of 5 blocks of 10 calls (compiled, default options);
- the seconds of three compiles of a graph calling six float functions (tanh, exp, sin, cos, erf, log1p), each into a fresh
  cache (the first includes the process's warm-up).

Compare two codegen-cpp versions on one machine by running it on each tree, alternating:

    python benchmarks/cpu_vector_math.py
    git worktree add /tmp/old <rev>
    PYTHONPATH=/tmp/old/packages/codegen-cpp/src python benchmarks/cpu_vector_math.py
"""

from __future__ import annotations

import tempfile
import time

import torch
import torchkiln
import torchkiln_codegen_cpp


def pointwise(x):
    return torch.tanh(x) * torch.exp(-x.abs()) + torch.sin(x) * torch.cos(x)


def gelu(x):
    return torch.nn.functional.gelu(x)


def softmax(x):
    return torch.softmax(x, -1)


def logsumexp(x):
    return torch.logsumexp(x * 1.5, -1)


def tails(x):  # rows of 1001: every loop has a scalar tail
    return torch.log1p(x.abs()) * torch.erf(x)


def six(x):
    return (
        torch.tanh(x) * torch.exp(-x.abs())
        + torch.sin(x) * torch.cos(x)
        + torch.erf(x) * torch.log1p(x.abs())
    )


CASES = [
    (pointwise, (4096, 1024)),
    (gelu, (4096, 1024)),
    (softmax, (4096, 1024)),
    (logsumexp, (4096, 1000)),
    (tails, (4099, 1001)),
    (softmax, (64, 50257)),
]


def hits(x):
    y = torch.cos(x)
    return (y == y.amin()).sum()


def main() -> None:
    print(f"codegen-cpp {torchkiln_codegen_cpp.__version__}: {torchkiln_codegen_cpp.__file__}")
    torch.manual_seed(0)
    missed = [
        n for n in range(9, 200, 7) if torchkiln.compile(hits, dynamic=False)(torch.randn(n)) == 0
    ]
    print(f"cos(x) == cos(x).amin() held for no element at {len(missed)} of 28 sizes: {missed}")
    for fn, shape in CASES:
        x = torch.randn(shape)
        compiled = torchkiln.compile(fn)
        torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-5)
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(10):
                compiled(x)
            best = min(best, (time.perf_counter() - start) / 10)
        print(f"{fn.__name__} {shape}: {best * 1e3:.2f} ms")
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        options = {"cache_dir": tempfile.mkdtemp(), "graph_cache": False}
        torchkiln.compile(six, options=options)(torch.randn(1000, 100))
        seconds.append(round(time.perf_counter() - start, 2))
    print(f"compile of six float functions, s: {seconds}")


if __name__ == "__main__":
    main()
