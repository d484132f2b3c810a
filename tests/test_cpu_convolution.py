"""Convolution nets on the CPU end to end (torchkiln.compile, C++ code generator): batch norm
folded at inference, convolutions through oneDNN with fused activations and residual adds;
equal to eager in eval/no_grad, in train mode, and after the parameters change."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchkiln
from torch import nn
from torchkiln_loop_ir.mkldnn import mkldnn_available, use_mkldnn_convolutions

needs_mkldnn = pytest.mark.skipif(not mkldnn_available(), reason="torch built without mkldnn")


class Block(nn.Module):
    def __init__(self, c, act):
        super().__init__()
        self.act = act
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(c)
        self.proj = nn.Conv2d(c, c, 1)

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        return self.act(self.bn2(self.conv2(y)) + self.proj(x))


class Net(nn.Module):
    def __init__(self, act=F.relu):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.act = act
        self.block = Block(8, act)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)
        self.fc = nn.Linear(8, 5)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-1, 1)
                    m.running_var.uniform_(0.5, 2)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-1, 1)

    def forward(self, x):
        x = F.max_pool2d(self.act(self.stem(x)), 2)
        x = F.avg_pool2d(self.dw(self.block(x)), 2)
        return self.fc(x.flatten(1).mean(1, keepdim=True).expand(-1, 8))


def _twin(model):
    other = Net(model.act)
    other.load_state_dict(model.state_dict())
    return other.train(model.training)


def _compile(model, **loop_ir):
    return torchkiln.compile(
        model, options={"strict": True, "graph_cache": False, "loop_ir": loop_ir}
    )


@pytest.mark.parametrize("act", [F.relu, F.silu], ids=["relu", "silu"])
def test_eval_no_grad_matches_eager(act):
    model = Net(act).eval()
    compiled = _compile(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 3, 16, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_train_mode_matches_eager_and_updates_running_stats():
    model = Net().train()
    eager = _twin(model)
    compiled = _compile(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 3, 16, 16)
            torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model.block.bn2.running_mean, eager.block.bn2.running_mean)
    torch.testing.assert_close(model.stem[1].running_var, eager.stem[1].running_var)


def test_training_step_gradients_match_eager():
    model = Net().eval()
    eager = _twin(model)
    compiled = _compile(model)
    x = torch.randn(2, 3, 16, 16)
    compiled(x).square().sum().backward()
    eager(x).square().sum().backward()
    torch.testing.assert_close(
        model.block.conv1.weight.grad, eager.block.conv1.weight.grad, rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("how", ["in_place", "load_state_dict"])
def test_parameter_mutation_after_first_call(how):
    model = Net().eval()
    compiled = _compile(model)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        if how == "in_place":
            model.block.conv2.weight.mul_(-2.0)
            model.block.bn2.running_mean.add_(0.5)
        else:
            model.load_state_dict(Net().state_dict())
        x2 = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(compiled(x2), model(x2), rtol=1e-4, atol=1e-5)
    assert torchkiln.report(compiled).num_graphs == 1


def test_without_mkldnn_path_matches_eager():
    model = Net(F.silu).eval()
    compiled = _compile(model, mkldnn_convolution=False)
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    externs = torchkiln.report(compiled).graphs[0].extern_calls
    assert "aten.convolution" in externs and not any("mkldnn" in e for e in externs)


@needs_mkldnn
def test_epilogue_decisions_are_logged():
    model = Net(F.silu).eval()
    compiled = _compile(model)
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    graph = torchkiln.report(compiled).graphs[0]
    log = "\n".join(graph.convolutions)
    assert "with swish fused" in log  # conv1 -> batch norm folded -> silu
    assert "with the residual add" in log  # conv2 + proj(x)
    assert "as a matrix multiply" in log  # proj: 1x1, stride 1
    assert "activation not fused" in log  # the depthwise convolution feeds avg_pool2d
    assert any("mkldnn_convolution" in e for e in graph.extern_calls)


@needs_mkldnn
def test_pass_keeps_unsupported_convolutions():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.ConvTranspose2d(4, 4, 2, stride=2)
            self.c1 = nn.Conv1d(4, 4, 3)

        def forward(self, x):
            y = self.up(x)
            return self.c1(y.flatten(2)[..., :10]).relu()

    model = M().eval()
    compiled = _compile(model)
    with torch.no_grad():
        x = torch.randn(1, 4, 4, 4)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert callable(use_mkldnn_convolutions)


_CACHED_RUN = """
import sys, torch, torchkiln
sys.path.insert(0, {tests!r})
from test_cpu_convolution import Net
torch.manual_seed(0)
model = Net().eval()
compiled = torchkiln.compile(model, options={{"strict": True}})
with torch.no_grad():
    x = torch.randn(2, 3, 16, 16)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    model.block.conv1.weight.mul_(0.5)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
print(torchkiln.report(compiled).graphs[0].cache)
"""


def test_graph_cache_keeps_folding_and_onednn_calls(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TORCHKILN_CACHE_DIR": str(tmp_path)}
    code = _CACHED_RUN.format(tests=str(Path(__file__).parent))
    verdicts = [
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
        for _ in range(2)
    ]
    assert verdicts == ["miss", "hit"]


@needs_mkldnn
def test_inductor_freezing_option_turns_folding_off():
    model = Net().eval()
    compiled = torchkiln.compile(
        model, options={"strict": True, "graph_cache": False, "freezing": False}
    )
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    log = "\n".join(torchkiln.report(compiled).graphs[0].convolutions)
    # the batch norm is not folded: its subtraction now follows the convolution
    assert "its consumer aten.sub.Tensor" in log and "with relu fused" not in log


class Downsample(nn.Module):
    """A ResNet block that halves the resolution: its shortcut is a strided 1x1 convolution."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.short = nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
        )
        with torch.no_grad():
            for bn in (self.bn, self.short[1]):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)) + self.short(x))


@needs_mkldnn
@pytest.mark.parametrize("size,stride", [(16, 2), (15, 2), (17, 3)])
def test_strided_1x1_shortcut_as_matrix_multiply(size, stride):
    # the kept pixels (every stride-th row and column, odd sizes included) copied into a matrix
    model = Downsample(6, 10, stride).eval()
    compiled = _compile(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 6, size, size)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    log = "\n".join(torchkiln.report(compiled).graphs[0].convolutions)
    assert "matrix multiply over the channels-last pixels of the strided pixels" in log


@needs_mkldnn
@pytest.mark.parametrize("stride", [1, 2])
def test_batch_norm_training_gradients_match_eager(stride):
    # In training, the forward saves each convolution's result for batch norm's backward; the
    # oneDNN result is channels-last and must reach the backward in the traced (contiguous)
    # layout (it once went uncopied and every gradient was wrong)
    model = Downsample(4, 8, stride).train()
    eager = Downsample(4, 8, stride).train()
    eager.load_state_dict(model.state_dict())
    compiled = _compile(model)
    x = torch.randn(2, 4, 12, 12)
    y, expected = compiled(x), eager(x)
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-5)
    cotangent = torch.randn_like(expected)
    y.backward(cotangent)
    expected.backward(cotangent)
    for name, p in model.named_parameters():
        q = dict(eager.named_parameters())[name]
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    torch.testing.assert_close(model.bn.running_var, eager.bn.running_var)


@needs_mkldnn
def test_a_training_step_keeps_aten_convolutions_and_its_saved_layouts():
    """In a training step (train mode, gradients) the forward and backward graphs keep ATen's
    convolutions: oneDNN's channels-last activations made every saved convolution output a
    transposing copy back to the traced NCHW strides (a conv suite step ran at 0.66x eager's
    speed on the CPU with them, 1.17x without). Inference in the same process still takes
    oneDNN. Gradients and running statistics match eager over two steps with fresh inputs."""
    model = Net(F.silu).train()
    eager = _twin(model)
    compiled = _compile(model)
    for _ in range(2):
        x = torch.randn(4, 3, 16, 16)
        compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
            p.grad, q.grad = None, None
    torch.testing.assert_close(model.block.bn1.running_var, eager.block.bn1.running_var)
    graph = torchkiln.report(compiled).graphs[0]
    assert "aten.convolution" in graph.extern_calls
    assert not any("mkldnn" in e for e in graph.extern_calls), graph.extern_calls

    model.eval()
    inference = _compile(model)
    with torch.no_grad():
        x = torch.randn(2, 3, 16, 16)
        torch.testing.assert_close(inference(x), eager.eval()(x), rtol=1e-4, atol=1e-5)
    assert any("mkldnn" in e for e in torchkiln.report(inference).graphs[0].extern_calls)
