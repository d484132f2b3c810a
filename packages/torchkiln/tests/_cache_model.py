"""A tiny model compiled by test_graph_cache.py, in the test process and in fresh subprocesses.

``python _cache_model.py CACHE_DIR train|infer BATCH [--forbid-compiling]`` compiles the model
(strict mode) with that cache directory, checks one step against eager PyTorch on fresh random
inputs, and prints a JSON line: each graph's cache verdict and phases, and the largest errors.
``--forbid-compiling`` makes aot-partition and loop-ir raise if called: a cache hit must not
need them.
"""

from __future__ import annotations

import json
import sys

import torch


def build() -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights in every process (the key does not cover values)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )


def step(model: torch.nn.Module, fn, x: torch.Tensor, train: bool) -> list[torch.Tensor]:
    """The outputs (and, when training, the parameters' gradients) of one step of ``fn``."""
    model.zero_grad(set_to_none=True)
    if not train:
        with torch.no_grad():
            return [fn(x)]
    out = fn(x)
    (out * out).sum().backward()
    return [out.detach()] + [p.grad.clone() for p in model.parameters()]


def run(cache_dir: str, train: bool, batch: int, dtype=torch.float32, **options):
    import torchkiln

    model = build().to(dtype)
    compiled = torchkiln.compile(model, options={"strict": True, "cache_dir": cache_dir, **options})
    x = torch.randn(batch, 8, dtype=dtype)
    got = step(model, compiled, x, train)
    want = step(model, model, x, train)
    error = max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True))
    graphs = torchkiln.report(compiled).graphs
    return {
        "error": error,
        "cache": [g.cache for g in graphs],
        "phases": [sorted(g.phases) for g in graphs],
        "kernels": [g.kernels for g in graphs],
    }


def _forbid_compiling() -> None:
    import torchkiln_aot_partition
    import torchkiln_loop_ir

    def forbidden(*args, **kwargs):
        raise AssertionError("a cache hit must not trace, lower or schedule")

    torchkiln_aot_partition.aot_compile = forbidden
    torchkiln_loop_ir.compile_graph = forbidden


if __name__ == "__main__":
    if "--forbid-compiling" in sys.argv:
        _forbid_compiling()
    print(json.dumps(run(sys.argv[1], sys.argv[2] == "train", int(sys.argv[3]))))
