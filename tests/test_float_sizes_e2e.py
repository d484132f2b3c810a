"""Float values computed from symbolic sizes (a training batch norm's n / (n - 1) under a
dynamic batch) lower to kernel arithmetic: one graph, eager's outputs, gradients and running
statistics across batch sizes, no fallback."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln

CODEGENS = ["cpp", "triton"]


@pytest.mark.parametrize("codegen", CODEGENS)
def test_batch_norm_training_with_a_symbolic_batch(codegen):
    if codegen == "triton":
        pytest.importorskip("torchkiln_codegen_triton")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU()
    ).train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(
        model, dynamic=True, options={"strict": True, "codegen": codegen, "graph_cache": False}
    )
    for batch in (4, 6, 9):  # fresh inputs and sizes, one compiled graph
        x = torch.randn(batch, 3, 10, 10)
        out, want = compiled(x), ref(x)
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
        grad = torch.randn_like(want)
        out.backward(grad)
        want.backward(grad)
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(model[1], name), getattr(ref[1], name))
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=1e-3, rtol=1e-3)
            p.grad, q.grad = None, None
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1
    assert not [f for g in report.graphs for f in g.fallbacks]
