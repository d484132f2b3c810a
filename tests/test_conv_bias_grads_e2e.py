"""A convolution backward's bias gradient computed as a sum loop-ir generates (loop-ir's
conv_bias_grads.py), not by ATen's reduction inside ``convolution_backward``: 2-D, 1-D and
transposed convolutions with biases, float32 and bfloat16 autocast, NCHW and channels-last,
both code generators; every gradient equals eager's on fresh random inputs, step after step
(``LoopIROptions.generated_conv_bias_grads``; its default ``"auto"`` generates them for the
Triton backend only)."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 4, stride=4)
        self.dw = nn.Conv2d(8, 8, 7, padding=3, groups=8)  # ConvNeXt's depthwise, with a bias
        self.pw = nn.Conv1d(8, 6, 1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.plain = nn.Conv2d(8, 8, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.dw(torch.relu(self.stem(x))) + 1
        y = y + self.plain(y)
        return self.pw(y.flatten(2)).sum() + self.up(y).square().mean()


def _compiled(seed: int, **options):
    """A fresh model, its eager twin and the model compiled with ``options``."""
    torch.manual_seed(seed)
    model = Net()
    reference = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False, **options})
    return model, reference, compiled


def _bias_log(compiled) -> list[str]:
    return [
        line
        for g in torchkiln.report(compiled).graphs
        for line in g.convolutions
        if "bias gradient" in line
    ]


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("layout", ["never", "always"], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "autocast_bf16"])
def test_bias_gradients_equal_eager(codegen, layout, autocast):
    loop_ir = {
        "generated_conv_bias_grads": True,
        "channels_last": layout,
        "mkldnn_convolution": False,
        "direct_convolution_taps": 0,
    }
    model, reference, compiled = _compiled(0, codegen=codegen, loop_ir=loop_ir)
    tol = {"rtol": 3e-2, "atol": 3e-2} if autocast else {"rtol": 1e-4, "atol": 1e-5}
    for _ in range(2):
        x = torch.randn(2, 3, 32, 32)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            got, expected = compiled(x), reference(x)
        got.float().backward()
        expected.float().backward()
        torch.testing.assert_close(got, expected, **tol)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
    # four convolutions with a bias (the stem's input needs no gradient: still a backward)
    log = _bias_log(compiled)
    assert sum("is a generated sum" in line for line in log) == 4, log


@pytest.mark.parametrize(("codegen", "generated"), [("cpp", 0), ("triton", 4)])
def test_default_generates_the_sums_for_the_gpu_backend_only(codegen, generated):
    """``"auto"``: the Triton backend (CUDA; here CPU tensors under its interpreter) generates
    the sums, where a layer norm's mixed-order kernel can take them; C++ keeps ATen's."""
    model, reference, compiled = _compiled(1, codegen=codegen)
    x = torch.randn(2, 3, 32, 32)
    compiled(x).backward()
    reference(x).backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    assert sum("is a generated sum" in line for line in _bias_log(compiled)) == generated


def test_other_values_are_refused():
    from torchkiln_loop_ir import LoopIROptions

    with pytest.raises(ValueError, match="generated_conv_bias_grads"):
        LoopIROptions(generated_conv_bias_grads="always")
