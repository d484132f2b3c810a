"""Per-call cost of a compiled guard set for two 8-element CPU tensors, against a bare call.

Run: ``python packages/guards/benchmarks/guard_overhead.py``. Prints nanoseconds per call for
- a bare Python function call with the same parameters (the floor),
- the compiled check of TensorMatch(x) + TensorMatch(y),
- the same plus GlobalStateMatch and a StorageAliasMatch (what a capture of
  ``(x * y + 1).relu().sum()`` records),
- eager ``(x * y + 1).relu().sum()`` itself, for scale,
and the cost of single expressions the generated code is built from, to justify its choices.
"""

from __future__ import annotations

import inspect
import timeit

import torch
from torchkiln_guards import (
    GlobalStateMatch,
    LocalSource,
    StorageAliasMatch,
    TensorMatch,
    compile_guards,
)


def fn(x, y):
    return (x * y + 1).relu().sum()


def _ns(stmt, ns, number=200_000, repeat=7) -> float:
    return min(timeit.repeat(stmt, globals=ns, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    x, y = torch.randn(8), torch.randn(8)
    X, Y = LocalSource("x"), LocalSource("y")
    sig = inspect.signature(fn)
    tensors = compile_guards(
        [TensorMatch.from_tensor(X, x), TensorMatch.from_tensor(Y, y)],
        signature=sig,
        f_globals=globals(),
    )
    full = compile_guards(
        [
            TensorMatch.from_tensor(X, x),
            TensorMatch.from_tensor(Y, y),
            GlobalStateMatch.capture(),
            StorageAliasMatch(X, Y, False),
        ],
        signature=sig,
        f_globals=globals(),
    )
    assert tensors.check(x, y) and full.check(x, y)

    def bare(x, y):
        return True

    ns = {"bare": bare, "t": tensors.check, "f": full.check, "fn": fn, "x": x, "y": y}
    rows = [
        ("bare function call", "bare(x, y)"),
        ("check: 2 x TensorMatch", "t(x, y)"),
        ("check: + GlobalStateMatch + StorageAliasMatch", "f(x, y)"),
        ("eager (x * y + 1).relu().sum()", "fn(x, y)"),
    ]
    print(f"torch {torch.__version__}")
    for name, stmt in rows:
        print(f"{_ns(stmt, ns, number=20_000 if 'fn' in stmt else 200_000):9.0f} ns  {name}")
    print("\nsingle expressions (ns, including ~15-30 ns of timeit overhead):")
    D, T, K = torch.float32, torch.Tensor, torch._C._dispatch_keys
    exprs = [
        "type(x) is T",
        "x.dtype is D",
        "x.is_cpu",
        "x.device == dev",
        "x.shape == (8,)",
        "x.size() == (8,)",
        "x.stride() == (1,)",
        "x.is_contiguous()",
        "x.storage_offset() == 0",
        "x.requires_grad is False",
        "K(x).raw_repr() == 0",
        "x.untyped_storage()._cdata",
        "torch._C.is_grad_enabled()",
    ]
    ens = {"x": x, "T": T, "D": D, "K": K, "torch": torch, "dev": torch.device("cpu")}
    for e in exprs:
        print(f"{_ns(e, ens, number=100_000, repeat=5):9.0f}  {e}")


if __name__ == "__main__":
    main()
