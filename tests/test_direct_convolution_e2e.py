"""Direct convolutions (loop-ir's lowering/convolution.py): a depthwise convolution of at most
``LoopIROptions.direct_convolution_taps`` taps (by default 25: up to 5x5) is
generated code summing its taps, its batch norm, bias and activation fused with it, instead of
a cuDNN call. Forced on the CPU with ``channels_last="always"`` (the pass
runs by default for inference graphs on CUDA), on the C++ backend and, with TRITON_INTERPRET=1,
Triton's interpreter: equal to eager on fresh random inputs for strides, paddings, dilations,
groups and channel multipliers, after an in-place weight update (the taps are rebuilt), with
the convolutions lowered (no fallback) and their results not written on their own."""

from __future__ import annotations

import pytest
import torch
import torchkiln
from convnets import (
    assert_equals_eager_over_updates,
    codegens,
    compile_convnet,
    convolution_log,
    cuda_default_errors,
)
from torch import nn


class Net(nn.Module):
    """A MobileNet/ConvNeXt-like net of every kind of small convolution."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(  # 3 input channels: cuDNN's (a matrix multiply)
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.Hardswish()
        )
        self.dw = nn.Sequential(  # depthwise 5x5, stride 2, with batch norm and ReLU
            nn.Conv2d(8, 8, 5, stride=2, padding=2, groups=8, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
        )
        self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)  # with a bias
        self.multiplier = nn.Conv2d(8, 16, 3, padding=1, groups=8)  # two outputs per channel
        self.grouped = nn.Conv2d(16, 16, 3, padding=1, groups=4)  # 4 channels a group: cuDNN's
        self.dw7 = nn.Conv2d(16, 16, 7, padding=3, groups=16)  # ConvNeXt's: direct at 49 taps
        self.norm = nn.LayerNorm(16)
        self.pw = nn.Conv2d(16, 24, 1)  # 16 taps: a matrix multiply, not direct, on CUDA
        self.big = nn.Conv2d(24, 8, 3, padding=1)  # 216 taps: cuDNN's

    def forward(self, x):
        y = self.dw(self.stem(x))
        y = torch.relu(self.dilated(y)) + y
        y = self.grouped(self.multiplier(y))
        z = self.dw7(y).permute(0, 2, 3, 1)
        y = y + self.norm(z).permute(0, 3, 1, 2)
        return self.big(torch.nn.functional.gelu(self.pw(y)))


def _compile(model, codegen, taps=None):
    return compile_convnet(model, codegen, direct_convolution_taps=taps)


@pytest.mark.parametrize("codegen", codegens())
def test_direct_convolutions_equal_eager(codegen):
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():  # batch-norm statistics of a trained net, not 0 and 1
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    compiled = _compile(model, codegen, taps=49)  # the 7x7 too
    assert_equals_eager_over_updates(model, compiled, (2, 3, 22, 18))
    log = convolution_log(compiled)
    direct = [line for line in log if "direct convolution" in line]
    assert len(direct) == 4, log  # dw, dilated, multiplier, dw7
    report = torchkiln.report(compiled)
    assert sum(len(g.fallbacks) for g in report.graphs) == 0


@pytest.mark.parametrize("codegen", codegens())
def test_bfloat16_as_near_float64_as_eager(codegen):
    """In bfloat16 the taps are summed in float32 and the sum rounded once (with its batch norm
    and activation): as near a float64 reference as eager's cuDNN/ATen result."""
    torch.manual_seed(1)
    model = Net().eval()
    reference = Net().eval().double()
    reference.load_state_dict(model.state_dict())
    model = model.to(torch.bfloat16)
    compiled = _compile(model, codegen)
    x = torch.randn(2, 3, 16, 16, dtype=torch.bfloat16)
    with torch.no_grad():
        got, eager, exact = compiled(x), model(x), reference(x.double())
    direct = [line for line in convolution_log(compiled) if "direct convolution" in line]
    assert len(direct) == 3, direct  # by default the 7x7 stays cuDNN's
    err_got = (got.double() - exact).abs().max().item()
    err_eager = (eager.double() - exact).abs().max().item()
    assert err_got <= 1.5 * err_eager + 1e-3, (err_got, err_eager)


def test_direct_convolution_taps_zero_keeps_atens():
    model = Net().eval()
    compiled = _compile(model, "cpp", taps=0)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert not [line for line in convolution_log(compiled) if "direct" in line]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU session runs it)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_default_options(dtype):
    """On CUDA the pass runs by default: 3 direct convolutions (the 7x7 is the depthwise strip
    kernel's: tests/test_depthwise_convolution_e2e.py), each result as near a float64
    reference as eager's."""
    compiled, err_got, err_eager = cuda_default_errors(Net, (4, 3, 40, 36), dtype)
    assert err_got <= 1.5 * err_eager + (1e-3 if dtype == torch.bfloat16 else 1e-5)
    direct = [line for line in convolution_log(compiled) if "direct convolution" in line]
    assert len(direct) == 3, direct
