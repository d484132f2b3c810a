"""Inference-time freezing: batch norm folded into convolution, weight-only subgraphs computed once
and again after any parameter change; results equal eager on fresh inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _aot_test_modules import batch_norm
from torch import nn
from torchkiln_aot_partition import aot_compile
from torchkiln_aot_partition.freezing import FoldedConstantsChanged

aten = torch.ops.aten


class BatchNorm(nn.BatchNorm2d):
    # nn.BatchNorm2d's input-dim check is control flow fx cannot trace
    def forward(self, x):
        if self.training:
            self.num_batches_tracked.add_(1)
        return batch_norm(self, x, self.training)


class ConvNet(nn.Module):
    def __init__(self, act=F.relu, bias=False):
        super().__init__()
        self.act = act
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=bias)
        self.bn1 = BatchNorm(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=bias)
        self.bn2 = BatchNorm(8)
        self.fc = nn.Linear(8, 4)
        for bn in (self.bn1, self.bn2):  # non-trivial statistics, so folding them is tested
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-1, 1)

    def forward(self, x):
        x = F.max_pool2d(self.act(self.bn1(self.conv1(x))), 2)
        x = self.act(self.bn2(self.conv2(x)) + x)
        return self.fc(x.mean(dim=(2, 3)))


def _ops(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _compile(model, x, compiler, capture):
    return aot_compile(capture(model), [x], fw_compiler=compiler)


@pytest.mark.parametrize("act", [F.relu, F.silu], ids=["relu", "silu"])
@pytest.mark.parametrize("bias", [False, True])
def test_batch_norm_folds_into_convolution(act, bias, compiler, capture):
    model = ConvNet(act, bias).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled = _compile(model, x, compiler, capture)
        gm = compiler.graphs[0]
        assert gm.meta["freeze"].folded_epilogues == 8  # sub, mul, mul, add per batch norm
        # no batch-norm arithmetic left on the convolution outputs, no rsqrt of the variance
        assert aten.rsqrt.default not in _ops(gm) and aten.sub.Tensor not in _ops(gm)
        for _ in range(2):
            x2 = torch.randn(2, 3, 8, 8)
            torch.testing.assert_close(compiled(x2)[0], model(x2))


def test_train_mode_does_not_fold(compiler, capture):
    model = ConvNet().train()
    eager = ConvNet().train()
    eager.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled = _compile(model, x, compiler, capture)
        assert compiler.graphs[0].meta["freeze"].folded_epilogues == 0
        x2 = torch.randn(2, 3, 8, 8)
        torch.testing.assert_close(compiled(x2)[0], eager(x2))
        # the running statistics the graph updates are never folded: they match eager's
        torch.testing.assert_close(model.bn1.running_mean, eager.bn1.running_mean)
        torch.testing.assert_close(model.bn2.running_var, eager.bn2.running_var)


def test_grad_mode_takes_the_training_path(compiler, capture):
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    compiled = _compile(model, x, compiler, capture)
    assert "freeze" not in compiler.graphs[0].meta
    out = compiled(x)[0]
    out.sum().backward()
    ref = ConvNet().eval()
    ref.load_state_dict(model.state_dict())
    ref(x).sum().backward()
    torch.testing.assert_close(model.conv1.weight.grad, ref.conv1.weight.grad)


@pytest.mark.parametrize("how", ["mul_", "load_state_dict", "data", "buffer"])
def test_parameter_change_after_first_call_refolds(how, compiler, capture):
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled = _compile(model, x, compiler, capture)
        torch.testing.assert_close(compiled(x)[0], model(x))
        if how == "mul_":
            model.conv2.weight.mul_(-1.5)
        elif how == "load_state_dict":
            other = ConvNet().eval()
            model.load_state_dict(other.state_dict())
        elif how == "data":
            model.conv1.weight.data = torch.randn_like(model.conv1.weight)
        else:
            model.bn2.running_var.fill_(3.0)
        x2 = torch.randn(2, 3, 8, 8)
        torch.testing.assert_close(compiled(x2)[0], model(x2))
    assert len(compiler.graphs) == 1  # refolded, not recompiled


def test_parameter_of_another_shape_is_refused(compiler, capture):
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled = _compile(model, x, compiler, capture)
        model.conv1.weight.data = torch.randn(8, 3, 5, 5)
        with pytest.raises(FoldedConstantsChanged):
            compiled(x)


def test_weight_only_subgraph_is_folded_but_outputs_are_not(compiler, capture):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8))

        def forward(self, x):
            w = torch.tanh(self.w) * 2
            return x @ w.t(), w

    model = M()
    x = torch.randn(4, 8)
    with torch.no_grad():
        compiled = _compile(model, x, compiler, capture)
        gm = compiler.graphs[0]
        out, w = compiled(x)
        torch.testing.assert_close(out, model(x)[0])
        # w is returned: computed in the graph, so the caller owns it and the cache is safe
        w.add_(100)
        out2, w2 = compiled(x)
        torch.testing.assert_close(out2, model(x)[0])
        torch.testing.assert_close(w2, model(x)[1])
    assert any("returned by the graph" in k for k in gm.meta["freeze"].kept)


def test_inference_tensors_are_not_folded(compiler, capture):
    with torch.inference_mode():
        model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled = _compile(model, x, compiler, capture)
        assert compiler.graphs[0].meta["freeze"].constants == 0
        torch.testing.assert_close(compiled(x)[0], model(x))


def test_freezing_can_be_turned_off(compiler, capture):
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        compiled = aot_compile(capture(model), [x], fw_compiler=compiler, freeze_parameters=False)
        assert aten.rsqrt.default in _ops(compiler.graphs[0])
        torch.testing.assert_close(compiled(x)[0], model(x))


def test_refold_keeps_the_constant_tensors(compiler, capture):
    # a recorded CUDA graph reads the folded constants' memory: refolding writes into it
    model = ConvNet().eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        runtime = _compile(model, x, compiler, capture)
        before = list(runtime.folded.values(list(runtime.params)))
        model.conv1.weight.mul_(3.0)
        runtime.refresh_folded()
        after = runtime.folded.values(list(runtime.params))
        assert all(a is b for a, b in zip(after, before))
        torch.testing.assert_close(runtime(x)[0], model(x))
