"""A transformer block's layer norms trained through ``torchkiln.compile`` with the Triton
backend: each layer norm's backward is one mixed-order kernel (its input's gradient and its
weight's and bias's in one pass over the rows, loop-ir's mixed_order.py) and the gradients match
eager's on fresh random inputs (CPU tensors under Triton's interpreter)."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torch.nn as nn
import torchkiln

pytest.importorskip("torchkiln_codegen_triton")

pytestmark = [
    pytest.mark.usefixtures("private_cache_dir"),
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") in ("", "0"),
        reason="CPU tensors need Triton's interpreter (TRITON_INTERPRET=1, as CI sets)",
    ),
]


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x):
        h = x + self.down(nn.functional.gelu(self.up(self.ln1(x))))
        return self.ln2(h)


def test_layer_norm_backwards_train_as_mixed_order_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    eager = Block(96)
    ours = copy.deepcopy(eager)
    options = {"codegen": "triton", "strict": True, "loop_ir": {"split_programs": 64}}
    compiled = torchkiln.compile(ours, options=options)
    for _ in range(2):
        x = torch.randn(8, 64, 96)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, expected = compiled(xa), eager(xb)
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        g = torch.randn_like(out)
        out.backward(g)
        expected.backward(g)
        torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-4)
        for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
        ours.zero_grad()
        eager.zero_grad()
    kernels = [p.read_text() for p in tmp_path.rglob("kernels_backward/*.py")]
    mixed = [k for k in kernels if "mixed order:" in k]
    assert len(mixed) == 2, [k[:300] for k in kernels]
