"""TORCHKILN_DEBUG_DIR with the Triton code generator (CPU tensors under Triton's interpreter):
the dumped kernels are Triton sources, and an ATen fallback is a perf hint. Here, not in the
meta-package's own tests: those are CPU-only, and its package session installs it without the
"triton" extra (the CPU-only install)."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln

pytest.importorskip("torchkiln_codegen_triton")

pytestmark = [
    pytest.mark.usefixtures("private_cache_dir"),
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") in ("", "0"),
        reason="needs Triton's CPU interpreter for CPU tensors",
    ),
]


def _read(folder, name):
    text = (folder / name).read_text()
    assert text.strip(), f"{name} is empty"
    return text


def test_triton_kernels_are_dumped_and_an_aten_fallback_is_a_perf_hint(tmp_path):
    def f(x):
        return torch.sort(x, dim=-1).values * 2.0 + torch.relu(x).softmax(dim=-1)

    compiled = torchkiln.compile(
        f, options={"debug_dir": str(tmp_path), "codegen": "triton", "strict": True}
    )
    x = torch.randn(4, 16)
    torch.testing.assert_close(compiled(x), f(x))
    folder = tmp_path / "f_0"
    kernels = sorted((folder / "kernels_forward").iterdir())
    assert kernels and all(k.suffix == ".py" and "@triton.jit" in k.read_text() for k in kernels)
    assert "kernel0.launch_in(_s, " in _read(folder, "wrapper_forward.py")  # the stream launch
    hints = _read(folder, "perf_hints.txt")
    assert "ATen fallback aten.sort: no lowering" in hints
    (graph,) = torchkiln.report(compiled).graphs
    assert graph.fallbacks == ["aten.sort"] and any("aten.sort" in h for h in graph.perf_hints)


def test_costs_name_each_launch_sites_function_and_its_bytes(tmp_path):
    """costs_forward.json: one record per kernel and extern call, the kernel's record naming the
    function its launch site launches (the name a profiler shows) and the bytes it must move."""
    import json

    def f(x, w):
        h = torch.relu(x @ w)
        return h * 2.0, h.sum(-1)

    compiled = torchkiln.compile(
        f, options={"debug_dir": str(tmp_path), "codegen": "triton", "strict": True}
    )
    x, w = torch.randn(32, 48), torch.randn(48, 64)
    for got, want in zip(compiled(x, w), f(x, w)):
        torch.testing.assert_close(got, want)
    folder = tmp_path / "f_0"
    costs = json.loads(_read(folder, "costs_forward.json"))
    externs = [c for c in costs if c["kind"] == "extern"]
    assert [c["flops"] for c in externs] == [2 * 32 * 48 * 64]
    kernels = [c for c in costs if c["kind"] == "kernel"]
    assert kernels and all(c["function"].startswith("tk_") for c in kernels)
    sources = {
        p.read_text().split("launches ", 1)[1].split("\n", 1)[0]
        for p in (folder / "kernels_forward").iterdir()
    }
    assert {c["function"] for c in kernels} <= sources
    # the product read once, its relu * 2 and its row sums written: at least those bytes
    assert sum(c["bytes"] for c in kernels) >= 4 * (32 * 64 + 32 * 64 + 32)
