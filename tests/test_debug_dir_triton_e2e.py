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
