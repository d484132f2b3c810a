"""Convolutions channels-last with their weights converted once (loop-ir's channels_last.py,
forced on the CPU with ``channels_last="always"``; it runs by default for inference graphs on
CUDA): a small residual conv net equal to eager on fresh random inputs, after an in-place
weight update (the converted weight is rebuilt), with its output in eager's strides."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from torch import nn


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, groups=c)  # depthwise, with a bias

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.bn1(self.conv1(x)))))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 5, stride=2, padding=2)
        self.pool = nn.MaxPool2d(2)
        self.blocks = nn.Sequential(Block(8), Block(8))
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        s = self.stem(x)
        y = self.blocks(self.pool(s))
        # 4-D outputs too, one of them a convolution's own result: they keep eager's strides
        return self.head(y.mean((2, 3))), y, s


def _compile(model):
    return torchkiln.compile(
        model,
        options={
            "strict": True,
            "graph_cache": False,
            # the convolutions stay cuDNN's (the direct ones: test_direct_convolution_e2e.py)
            "loop_ir": {
                "channels_last": "always",
                "mkldnn_convolution": False,
                "direct_convolution_taps": 0,
            },
        },
    )


def _logged(compiled):
    return [
        line
        for g in torchkiln.report(compiled).graphs
        for line in g.convolutions
        if "channels-last" in line or "direct convolution" in line  # (a depthwise one, on CUDA)
    ]


@pytest.mark.parametrize("frozen", [True, False], ids=["no_grad", "grad_free_params"])
def test_inference_equals_eager_and_sees_weight_updates(frozen):
    model = Net().eval()
    if not frozen:
        for p in model.parameters():
            p.requires_grad_(False)
    compiled = _compile(model)
    for step in range(3):
        x = torch.randn(2, 3, 20, 20)
        with torch.no_grad():
            got, expected = compiled(x), model(x)
            if step == 1:  # an in-place update: the converted weights must follow it
                for p in model.parameters():
                    p.mul_(0.9).add_(0.01)
                got, expected = compiled(x), model(x)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)
        assert [g.stride() for g in got] == [e.stride() for e in expected]
    assert len(_logged(compiled)) == 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU session runs it)")
def test_cuda_inference_default_is_channels_last():
    model = Net().cuda().bfloat16().eval()
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False})
    x = torch.randn(4, 3, 32, 32, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        got, expected = compiled(x), model(x)
        reference = model.double()(x.double())
    for g, e, r in zip(got, expected, reference):
        assert (g.double() - r).abs().max() <= 3 * (e.double() - r).abs().max() + 1e-2
    assert [g.stride() for g in got] == [e.stride() for e in expected]
    assert len(_logged(compiled)) == 5


class BatchNormNet(nn.Module):
    """Training-mode batch norm between the convolutions (statistics and their backward run
    channels-last), a depthwise convolution, max-pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn = nn.Conv2d(3, 8, 5, stride=2, padding=2), nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.dw, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.stem(x))))
        y = torch.relu(y + self.bn2(self.dw(torch.relu(self.bn1(self.conv(y))))))
        return self.head(y.mean((2, 3)))


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "autocast_bf16"])
def test_training_channels_last_equals_eager(autocast):
    """A training step with channels-last convolutions: the forward saves channels-last values,
    the backward is compiled for their strides, and the outputs, every gradient (in eager's
    strides) and the running statistics equal eager's, step after step."""
    import copy

    torch.manual_seed(0)
    model = BatchNormNet()
    reference = copy.deepcopy(model)
    compiled = _compile(model)
    tol = {"rtol": 3e-2, "atol": 3e-2} if autocast else {"rtol": 1e-4, "atol": 1e-5}
    for _ in range(3):
        x = torch.randn(4, 3, 24, 24)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            got, expected = compiled(x), reference(x)
        got.float().square().mean().backward()
        expected.float().square().mean().backward()
        torch.testing.assert_close(got, expected, **tol)
        for (name, p), q in zip(model.named_parameters(), reference.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
            assert p.grad.stride() == q.grad.stride(), name
        for b, c in zip(model.buffers(), reference.buffers()):
            torch.testing.assert_close(b, c, **tol)
        model.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
    log = [line for g in torchkiln.report(compiled).graphs for line in g.convolutions]
    # 3 convolutions forward and 3 convolution backwards read channels-last (the stem's input
    # needs no gradient: its backward is a weight gradient only, still a convolution_backward)
    assert sum("convolution.default reads channels-last" in line for line in log) == 3
    assert sum("convolution_backward.default reads channels-last" in line for line in log) == 3
    assert any("compiled for the saved value's strides" in line for line in log)
    saved = [line for line in log if "saved for the backward channels-last" in line]
    if autocast:
        # the bfloat16 casts of the input and of two weights (the 5x5 stem's, the 3x3's; the
        # depthwise one is channels-last already) are saved as the channels-last copies the
        # convolutions read: each cast writes channels-last at once, and the backward's
        # convolutions get them as they are
        assert sum(line.startswith("_to_copy") for line in saved) == 3, saved
    else:
        assert not any(line.startswith("_to_copy") for line in saved), saved


class InvertedResidual(nn.Module):
    """MobileNet's block in bfloat16: a 1x1 expansion, a depthwise 3x3, squeeze-and-excitation
    (1x1 convolutions with biases on a 1x1 map) and a 1x1 projection, plus a strided 1x1
    shortcut (stays a convolution: its stride is not 1)."""

    def __init__(self, c=16, e=48):
        super().__init__()
        self.expand, self.bn1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw, self.bn2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
        self.se_reduce, self.se_expand = nn.Conv2d(e, 8, 1), nn.Conv2d(8, e, 1)
        self.project, self.bn3 = nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c)
        self.down = nn.Conv2d(c, c, 1, stride=2)

    def forward(self, x):
        y = nn.functional.hardswish(self.bn1(self.expand(x)))
        y = torch.relu(self.bn2(self.dw(y)))
        s = torch.sigmoid(self.se_expand(torch.relu(self.se_reduce(y.mean((2, 3), keepdim=True)))))
        y = self.bn3(self.project(y * s)) + x
        return self.down(y), y


def test_pointwise_convolutions_run_as_matmuls_bf16():
    torch.manual_seed(4)
    model = InvertedResidual().eval()
    for bn in (model.bn1, model.bn2, model.bn3):  # statistics that are not the identity
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    model = model.bfloat16()
    reference = copy.deepcopy(model).double()
    compiled = _compile(model)
    for _ in range(2):
        x = torch.randn(2, 16, 12, 12, dtype=torch.bfloat16)
        with torch.no_grad():
            got, expected, exact = compiled(x), model(x), reference(x.double())
        for g, e, r in zip(got, expected, exact):
            assert (g.double() - r).abs().max() <= 3 * (e.double() - r).abs().max() + 1e-2
        assert [g.stride() for g in got] == [e.stride() for e in expected]
    log = _logged(compiled)
    # expansion, the two squeeze-and-excitation convolutions and the projection
    assert sum("1x1 convolution as a matrix multiply" in line for line in log) == 4, log
    assert sum("convolution channels-last" in line for line in log) == 2, log  # dw, down


class ConvNeXtLike(nn.Module):
    """ConvNeXt's shape of block: a depthwise 7x7 whose output is permuted to channels-last
    rows for a layer norm and an MLP and permuted back, so the activation that reaches the head
    is channels-last, and the head's ``adaptive_avg_pool2d`` to one pixel gives its mean those
    strides with an ``as_strided`` (ATen's composite): a restride, not a view of other elements,
    which must not keep the graph in NCHW."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.head = nn.Linear(c, 5)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(nn.functional.gelu(self.fc1(self.norm(y))))
        x = y.permute(0, 3, 1, 2) + x  # channels-last, as the first operand is
        return self.head(nn.functional.adaptive_avg_pool2d(x, 1).flatten(1))


def _inference_log(model, x):
    """``model`` compiled, equal to eager on ``x`` without grad; its convolution log."""
    compiled = _compile(model)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    return [line for g in torchkiln.report(compiled).graphs for line in g.convolutions]


def test_global_pooling_restride_keeps_channels_last():
    """Inference and a training step of ``ConvNeXtLike`` equal eager, with both convolutions
    channels-last (before, the pooling's ``as_strided`` left the whole graph in NCHW), and both
    convolution backwards too: the backward's gradient of the restride scatters into a flat
    buffer of its own (``as_strided`` and ``as_strided_scatter`` of a new 1-D tensor, whose
    strides no layout changes), which left the backward in NCHW until loop-ir 0.8.33."""
    torch.manual_seed(0)
    log = _inference_log(ConvNeXtLike().eval(), torch.randn(2, 3, 32, 32))
    assert sum("convolution channels-last" in line for line in log) == 2, log

    model = ConvNeXtLike().train()
    reference = copy.deepcopy(model)
    compiled = _compile(model)
    x = torch.randn(2, 3, 32, 32)
    got, expected = compiled(x), reference(x)
    got.square().mean().backward()
    expected.square().mean().backward()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    log = [line for g in torchkiln.report(compiled).graphs for line in g.convolutions]
    assert sum("convolution.default reads channels-last" in line for line in log) == 2, log
    assert sum("convolution_backward.default reads channels-last" in line for line in log) == 2


def test_an_as_strided_of_other_elements_still_keeps_nchw():
    """An ``as_strided`` that reads other elements than its input's (here a transpose of the
    spatial dims written as strides) depends on the memory order: the pass leaves the graph."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            y = self.conv(x) + 1
            n, c, h, w = y.shape
            return y.as_strided((n, c, w, h), (c * h * w, h * w, 1, w)) * 2

    log = _inference_log(Net().eval(), torch.randn(2, 4, 6, 6))
    assert any("as_strided view" in line for line in log), log
