"""Repeated identical layers through the whole pipeline with the Triton code generator (CPU
tensors under Triton's interpreter): their kernels share functions (codegen-triton names a
kernel from its text), so a training step has fewer distinct kernel modules than launch sites,
and still computes eager's outputs and gradients."""

from __future__ import annotations

import copy
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


class Block(torch.nn.Module):
    """Two residual branches, as a transformer layer has: the partition saves the residual
    stream every other branch (aot-partition's recompute_policy.py), so every layer of two
    branches is partitioned alike and compiles to the same kernels."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.proj, self.proj2 = torch.nn.Linear(width, width), torch.nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + torch.nn.functional.gelu(self.proj(self.norm(x))) * 0.5
        return x + self.proj2(self.norm2(x))


def test_repeated_layers_share_kernels_and_train_like_eager(tmp_path):
    torch.manual_seed(0)
    width = 24
    model = torch.nn.Sequential(*(Block(width) for _ in range(4)))
    reference = copy.deepcopy(model)
    compiled = torchkiln.compile(
        model, options={"codegen": "triton", "strict": True, "debug_dir": str(tmp_path)}
    )
    for _ in range(2):  # fresh inputs each step
        x = torch.randn(3, 5, width)
        x_ref = x.clone().requires_grad_(True)
        x.requires_grad_(True)
        got, expected = compiled(x), reference(x_ref)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
        grad = torch.randn_like(expected)
        got.backward(grad)
        expected.backward(grad)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-4)
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4)
            p.grad, q.grad = None, None

    report = torchkiln.report(compiled)
    (graph,) = report.graphs
    assert report.num_kernels == graph.kernels
    # the layers' kernels, forward and backward, share functions (32 launch sites, 13 functions
    # when written; the first and last layers fuse with what is around them)
    assert 0 < report.num_distinct_kernels < graph.kernels
    kernel_files = {p for name, p in graph.artifacts.items() if ".kernel." in name}
    assert len(kernel_files) == report.num_distinct_kernels  # one module per distinct kernel
    # the debug dump still names every launch site, and says which ones share a function
    dumped = sorted((tmp_path / "Sequential_0").glob("kernels_*/*.py")) or sorted(
        tmp_path.glob("*/kernels_*/*.py")
    )
    assert len(dumped) == graph.kernels
    notes = [path.read_text().splitlines()[0] for path in dumped]
    assert all(n.startswith("# launch site kernel") and " launches tk_" in n for n in notes)
    shared = [n for path in dumped for n in path.read_text().splitlines()[1:2]]
    # some function is launched by the middle layers' sites: this one and at least two others
    assert any(
        n.startswith("# the same function is launched by ") and n.count("kernel") >= 2
        for n in shared
    )
