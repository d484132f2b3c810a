"""Depthwise convolutions as ``torchkiln::conv_depthwise`` (loop-ir's channels_last.py): in an
inference graph run channels-last, a depthwise convolution of stride 1 with more taps than the
direct convolution takes (ConvNeXt's 7x7) goes, with its bias, to the kernel the code generator
registered for the device (codegen-triton's strip kernel on CUDA), under
``LoopIROptions.depthwise_convolutions`` "auto". Forced on the CPU with "always": through
ATen's convolution where no kernel is registered (the C++ backend), and through the strip
kernel itself under Triton's interpreter, registered for the CPU by the test. Equal to eager on
fresh random inputs, after an in-place weight update (the taps are rebuilt), with no fallback;
a strided or dilated one, or one with a channel multiplier, is left to the other paths. Training
steps with "always": the forwards and the input gradients (the flipped taps) through it."""

from __future__ import annotations

import os

import pytest
import torch
import torchkiln
from convnets import (
    assert_equals_eager_over_updates,
    assert_training_steps_equal_eager,
    codegens,
    compile_convnet,
    convolution_log,
    cuda_default_errors,
)
from torch import nn
from torchkiln_loop_ir import channels_last as CL


class Block(nn.Module):
    """ConvNeXt's block: a 7x7 depthwise convolution, a layer norm over channels, an MLP."""

    def __init__(self, c: int, bias: bool = True):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c, bias=bias)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 2 * c), nn.Linear(2 * c, c)

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        return x + self.fc2(nn.functional.gelu(self.fc1(y))).permute(0, 3, 1, 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 2, stride=2)
        self.blocks = nn.Sequential(Block(16), Block(16, bias=False))
        self.strided = nn.Conv2d(16, 16, 7, stride=2, padding=3, groups=16)  # not stride 1
        self.dilated = nn.Conv2d(16, 16, 7, padding=6, dilation=2, groups=16)
        self.multiplier = nn.Conv2d(16, 32, 7, padding=3, groups=16)  # two outputs a channel

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.multiplier(self.dilated(self.strided(y)))


def _compile(model, codegen, depthwise="always"):
    return compile_convnet(model, codegen, depthwise_convolutions=depthwise)


def _depthwise_lines(compiled):
    assert sum(len(g.fallbacks) for g in torchkiln.report(compiled).graphs) == 0
    return [line for line in convolution_log(compiled) if "depthwise conv" in line]


@pytest.fixture
def registered_on_cpu(monkeypatch):
    """The strip kernel registered for the CPU (Triton's interpreter runs it there)."""
    from torchkiln_codegen_triton._depthwise import conv_depthwise

    monkeypatch.setitem(CL._DEPTHWISE_KERNELS, "cpu", conv_depthwise)


@pytest.mark.parametrize("codegen", codegens())
def test_depthwise_convolutions_equal_eager(codegen, request):
    if codegen == "triton":
        request.getfixturevalue("registered_on_cpu")
    torch.manual_seed(0)
    model = Net().eval()
    compiled = _compile(model, codegen)
    assert_equals_eager_over_updates(model, compiled, (2, 3, 30, 26))
    # the two blocks' 7x7s; the strided, dilated and multiplier ones stay cuDNN's or direct
    assert len(_depthwise_lines(compiled)) == 2


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") in (None, "", "0"), reason="needs Triton's interpreter"
)
def test_bfloat16_as_near_float64_as_eager(registered_on_cpu):
    """In bfloat16 the strip kernel sums in float32 and rounds once, with the bias: as near a
    float64 reference as eager's ATen result."""
    torch.manual_seed(1)
    model = Net().eval()
    reference = Net().eval().double()
    reference.load_state_dict(model.state_dict())
    model = model.to(torch.bfloat16)
    compiled = _compile(model, "triton")
    x = torch.randn(2, 3, 28, 28, dtype=torch.bfloat16)
    with torch.no_grad():
        got, eager, exact = compiled(x), model(x), reference(x.double())
    assert len(_depthwise_lines(compiled)) == 2
    err_got = (got.double() - exact).abs().max().item()
    err_eager = (eager.double() - exact).abs().max().item()
    assert err_got <= 1.5 * err_eager + 1e-3, (err_got, err_eager)


class TrainNet(nn.Module):
    """Depthwise convolutions a training step runs through ``conv_depthwise``: ConvNeXt's block
    (7x7, with and without a bias), a 5x7 kernel without padding (its input gradient's flipped
    padding is the whole kernel), and a 7x7 padded past its kernel (the forward only: the input
    gradient's padding would be negative, its backward stays cuDNN's)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 2, stride=2)
        self.blocks = nn.Sequential(Block(16), Block(16, bias=False))
        self.valid = nn.Conv2d(16, 16, (5, 7), groups=16)
        self.wide = nn.Conv2d(16, 16, 7, padding=7, groups=16, bias=False)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y = self.wide(torch.relu(self.valid(self.blocks(self.stem(x)))))
        return self.head(y.mean((2, 3)))


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "autocast_bf16"])
@pytest.mark.parametrize("codegen", codegens())
def test_training_steps_equal_eager(codegen, autocast, request):
    """Training steps with the forward's depthwise convolutions and their input gradients through
    ``conv_depthwise``: the loss and every gradient equal eager's, step after step, the
    parameters updated in place between steps."""
    if codegen == "triton":
        request.getfixturevalue("registered_on_cpu")
    torch.manual_seed(3)
    model = TrainNet()
    compiled = _compile(model, codegen)
    assert_training_steps_equal_eager(model, compiled, (2, 3, 30, 26), autocast)
    lines = _depthwise_lines(compiled)
    # the forward's four (two blocks, valid, wide); the input gradients of three (not the wide)
    assert sum(": convolution.default: depthwise" in line for line in lines) == 4, lines
    assert sum("input gradient a depthwise" in line for line in lines) == 3, lines


@pytest.mark.parametrize("depthwise", ["auto", "never"])
def test_no_kernel_for_the_device_or_never_keeps_the_convolution(depthwise):
    """ "auto" without a kernel registered for the device (the CPU), and "never": the 7x7s stay
    convolutions (cuDNN's on CUDA)."""
    model = Net().eval()
    compiled = _compile(model, "cpp", depthwise)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert not _depthwise_lines(compiled)


def test_bad_option_is_a_clear_error():
    from torchkiln_loop_ir import LoopIROptions

    with pytest.raises(ValueError, match="depthwise_convolutions"):
        LoopIROptions(depthwise_convolutions="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU session runs it)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cuda_default_options(dtype):
    """On CUDA the default sends the blocks' 7x7s to the strip kernel, each result as near a
    float64 reference as eager's cuDNN one."""
    compiled, err_got, err_eager = cuda_default_errors(Net, (4, 3, 60, 58), dtype)
    assert len(_depthwise_lines(compiled)) == 2
    assert err_got <= 1.5 * err_eager + (1e-3 if dtype == torch.bfloat16 else 1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU session runs it)")
@pytest.mark.parametrize("depthwise, gradients", [("auto", 0), ("always", 3)])
def test_cuda_training_steps(depthwise, gradients):
    """On CUDA under bfloat16 autocast: "always" sends a training step's 7x7s and their input
    gradients to the strip kernel; the default leaves training graphs to cuDNN (its host time
    is lower: loop-ir's compile.py). Either way the loss and gradients equal eager's."""
    torch.manual_seed(4)
    model = TrainNet().cuda()
    options = {"loop_ir": {"depthwise_convolutions": depthwise}}
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False, **options})
    assert_training_steps_equal_eager(model, compiled, (4, 3, 60, 58), autocast=True, steps=2)
    lines = _depthwise_lines(compiled)
    assert sum("input gradient a depthwise" in line for line in lines) == gradients, lines
