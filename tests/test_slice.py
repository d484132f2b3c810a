"""The end-to-end slice of issue 2: torchkiln.compile on straight-line tensor code, through both
code generators (Triton through its interpreter), with fused-kernel counts and guarded reuse."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: no GPU here

import pytest
import torch
import torchkiln

CODEGENS = ["cpp", "triton"]


def _compile(fn, codegen):
    return torchkiln.compile(fn, options={"strict": True, "codegen": codegen})


def pointwise(x, y):
    return torch.relu(x * 2.5 + y) - torch.sigmoid(y) / 3 + 1


def reductions(x):
    return x.sum(dim=1) + x.amax(dim=1) * x.mean(dim=1)


def matmul_epilogue(a, b, bias):
    return torch.tanh(a @ b + bias)


def chain_then_sum(x, y):
    return ((x + y) * 3).exp().sum(dim=-1)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_pointwise_with_broadcasting_and_scalars(codegen):
    compiled = _compile(pointwise, codegen)
    for _ in range(2):
        x, y = torch.randn(7, 33), torch.randn(33)
        torch.testing.assert_close(compiled(x, y), pointwise(x, y))


@pytest.mark.parametrize("codegen", CODEGENS)
def test_reductions_over_a_dim(codegen):
    compiled = _compile(reductions, codegen)
    x = torch.randn(9, 257)
    torch.testing.assert_close(compiled(x), reductions(x))


@pytest.mark.parametrize("codegen", CODEGENS)
def test_one_matmul_is_an_extern_call(codegen):
    compiled = _compile(matmul_epilogue, codegen)
    a, b, bias = torch.randn(12, 20), torch.randn(20, 7), torch.randn(7)
    torch.testing.assert_close(compiled(a, b, bias), matmul_epilogue(a, b, bias))
    (graph,) = torchkiln.report(compiled).graphs
    assert graph.extern_calls == ["aten.mm"]
    assert graph.fallbacks == []


@pytest.mark.parametrize("codegen", CODEGENS)
def test_pointwise_chain_ending_in_a_reduction_is_one_kernel(codegen):
    compiled = _compile(chain_then_sum, codegen)
    x, y = torch.randn(16, 65), torch.randn(16, 65)
    torch.testing.assert_close(compiled(x, y), chain_then_sum(x, y))
    report = torchkiln.report(compiled)
    assert [g.kernels for g in report.graphs] == [1]
    assert report.graphs[0].fallbacks == []


def test_a_changed_dtype_recompiles_and_a_matching_call_reuses():
    compiled = _compile(chain_then_sum, "cpp")
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    torch.testing.assert_close(compiled(x, y), chain_then_sum(x, y))
    assert len(torchkiln.report(compiled).graphs) == 1
    x2, y2 = torch.randn(4, 8), torch.randn(4, 8)  # same metadata: the entry is reused
    torch.testing.assert_close(compiled(x2, y2), chain_then_sum(x2, y2))
    assert len(torchkiln.report(compiled).graphs) == 1
    xd, yd = x.double(), y.double()  # another dtype: a second entry
    torch.testing.assert_close(compiled(xd, yd), chain_then_sum(xd, yd))
    assert len(torchkiln.report(compiled).graphs) == 2
    torch.testing.assert_close(compiled(x, y), chain_then_sum(x, y))  # the first still hits
    assert len(torchkiln.report(compiled).graphs) == 2


def test_a_module_wrapper_passes_parameters_through():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    compiled = torchkiln.compile(model, options={"strict": True})
    assert compiled[0].weight is model[0].weight
    assert compiled.state_dict().keys() == model.state_dict().keys()
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
