"""A transformer block's layer norms trained through ``torchkiln.compile`` with the Triton
backend: each layer norm's backward is one mixed-order kernel (its input's gradient and its
weight's and bias's in one pass over the rows, loop-ir's mixed_order.py; and the column sums of
its input's gradient, the bias gradient of the linear or convolution before it) and the
gradients match eager's on fresh random inputs (CPU tensors under Triton's interpreter)."""

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
    # the second layer norm's input gradient is the output projection's output gradient: its
    # column sums (that projection's bias gradient) come from the same kernel
    schedule = next(tmp_path.rglob("schedule_backward.txt")).read_text()
    assert schedule.count("across the rows of a program") == 2 + 3, schedule


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: a depthwise 7x7 convolution with a bias, a layer norm over the
    channels (channels last), a pointwise linear, the residual."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(width, width, 7, padding=3, groups=width)
        self.ln = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        y = self.fc(self.ln(self.dw(x).permute(0, 2, 3, 1)))
        return x + y.permute(0, 3, 1, 2)


def _close_as_eager(got, want, exact, name):
    """``got`` no further from the float64 result than twice eager's own error plus one step of
    the dtype at the result's scale (bfloat16 sums added in another order)."""
    exact = exact.double()
    step = max(1e-5, torch.finfo(got.dtype).eps) * (1 + exact.abs().max())
    ours, eagers = (got.double() - exact).abs().max(), (want.double() - exact).abs().max()
    assert ours <= 2 * eagers + step, (name, ours, eagers)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_convolution_bias_gradient_sums_in_the_layer_norm_backward(tmp_path, monkeypatch, dtype):
    """With the convolution's bias gradient a generated sum (``generated_conv_bias_grads``),
    that sum of the layer norm backward's input gradient is a third partial of its mixed-order
    kernel: no kernel of its own, no ATen reduction, and every gradient as close to float64's
    as eager's."""
    monkeypatch.setenv("TORCHKILN_DEBUG_DIR", str(tmp_path))
    torch.manual_seed(0)
    eager = ConvNeXtBlock(32).to(dtype)
    ours, exact = copy.deepcopy(eager), copy.deepcopy(eager).double()
    options = {
        "codegen": "triton",
        "strict": True,
        "loop_ir": {"split_programs": 64, "generated_conv_bias_grads": True},
    }
    compiled = torchkiln.compile(ours, options=options)
    for _ in range(2):
        x = torch.randn(4, 32, 16, 16, dtype=dtype).to(memory_format=torch.channels_last)
        xa, xb, xc = (x.clone().requires_grad_(), x.clone().requires_grad_(), x.double())
        xc.requires_grad_()
        out, expected, reference = compiled(xa), eager(xb), exact(xc)
        _close_as_eager(out, expected, reference, "output")
        g = torch.randn_like(out)
        out.backward(g)
        expected.backward(g)
        reference.backward(g.double())
        _close_as_eager(xa.grad, xb.grad, xc.grad, "input")
        for (name, p), q, r in zip(ours.named_parameters(), eager.parameters(), exact.parameters()):
            _close_as_eager(p.grad, q.grad, r.grad, name)
        for m in (ours, eager, exact):
            m.zero_grad()
    kernels = [p.read_text() for p in tmp_path.rglob("kernels_backward/*.py")]
    mixed = [k for k in kernels if "mixed order:" in k]
    assert len(mixed) == 1, [k[:300] for k in kernels]
    schedule = next(tmp_path.rglob("schedule_backward.txt")).read_text()
    assert schedule.count("across the rows of a program") == 3, schedule
    assert "sum_dim_int_list" in schedule  # the bias gradient, generated
