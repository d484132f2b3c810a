"""Mutated inputs written in place by the kernel that computes them (aot-partition's contract C2
meta ``mutations_in_place``, loop-ir's in_place.py), through both code generators: batch norm's
running statistics and counter after several training steps equal eager's with no write-back
copy; a user's ``x.add_(1)``; eval mode; an input that is also returned or whose new value is
saved for the backward (copied back as before); recompiles; the graph cache."""

from __future__ import annotations

import copy
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torchkiln
from torch import nn
from torchkiln_aot_partition.mutation import WRITE_BACK

pytestmark = pytest.mark.usefixtures("private_cache_dir")
CODEGENS = ["cpp", "triton"]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn2 = nn.Conv2d(3, 4, 3, bias=False), nn.BatchNorm2d(4)
        self.fc, self.bn1 = nn.Linear(4 * 5 * 5, 6), nn.BatchNorm1d(6)

    def forward(self, x):
        y = torch.relu(self.bn2(self.conv(x)))
        return self.bn1(self.fc(y.flatten(1)))


def _counts():
    return WRITE_BACK.copies, WRITE_BACK.in_place


def _delta(before):
    return WRITE_BACK.copies - before[0], WRITE_BACK.in_place - before[1]


def _same_buffers(model, ref):
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, msg=name, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_batch_norm_training_steps_write_statistics_in_place(codegen):
    torch.manual_seed(0)
    model = Net().train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True, "codegen": codegen})
    for _ in range(3):
        x = torch.randn(5, 3, 7, 7)
        before = _counts()
        out, expected = compiled(x), ref(x)
        assert _delta(before) == (0, 6)  # mean, var and counter of both norms: no copy
        torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
        out.square().mean().backward()
        expected.square().mean().backward()
    _same_buffers(model, ref)
    assert int(model.bn2.num_batches_tracked) == 3
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name, atol=1e-4, rtol=1e-4)
    # eval mode: the statistics are read, nothing is written
    model.eval(), ref.eval()
    x = torch.randn(5, 3, 7, 7)
    before = _counts()
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), ref(x), atol=1e-4, rtol=1e-4)
    assert _delta(before) == (0, 0)
    _same_buffers(model, ref)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_no_grad_training_mode_and_recompiles(codegen):
    """Under no_grad (the inference path) in training mode, with grad (a recompile: the grad mode
    is guarded), in eval mode and back: in place where statistics are written, eager's values."""
    torch.manual_seed(1)
    model = Net().train()
    ref = copy.deepcopy(model)
    compiled = torchkiln.compile(model, options={"strict": True, "codegen": codegen})
    for grad, training in [(False, True), (True, True), (False, False), (False, True)]:
        model.train(training), ref.train(training)
        x = torch.randn(4, 3, 7, 7)
        before = _counts()
        with torch.set_grad_enabled(grad):
            torch.testing.assert_close(compiled(x), ref(x), atol=1e-4, rtol=1e-4)
        assert _delta(before) == ((0, 6) if training else (0, 0))
    _same_buffers(model, ref)


@pytest.mark.parametrize("codegen", CODEGENS)
def test_a_user_input_mutated_in_place(codegen):
    def f(x, y):
        x.add_(1)
        return y * 2

    compiled = torchkiln.compile(f, options={"strict": True, "codegen": codegen})
    for _ in range(2):
        x, y = torch.randn(4, 5), torch.randn(4, 5)
        x_ref = x.clone()
        version = x._version
        before = _counts()
        torch.testing.assert_close(compiled(x, y), y * 2)
        assert _delta(before) == (0, 1)
        torch.testing.assert_close(x, x_ref + 1)
        assert x._version > version  # as eager's add_ bumps it


@pytest.mark.parametrize("codegen", CODEGENS)
def test_an_input_also_returned_or_saved_is_copied_back(codegen):
    def returned(x, y):
        x.mul_(2)
        return x, y + 1

    def saved(x, w):  # x's new value is what w's gradient needs
        x.mul_(2)
        return (x * w).sum()

    compiled = torchkiln.compile(returned, options={"strict": True, "codegen": codegen})
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    x_ref = x.clone()
    before = _counts()
    out, out_y = compiled(x, y)
    assert sum(_delta(before)) == 1  # capture returns x itself: the graph may write it in place
    torch.testing.assert_close(x, x_ref * 2)
    assert out.data_ptr() == x.data_ptr()  # the input itself, as eager returns
    torch.testing.assert_close(out_y, y + 1)

    compiled = torchkiln.compile(saved, options={"strict": True, "codegen": codegen})
    x, w = torch.randn(3, 4), torch.randn(3, 4, requires_grad=True)
    x_ref = x.clone()
    before = _counts()
    compiled(x, w).backward()
    assert _delta(before) == (1, 0)
    torch.testing.assert_close(x, x_ref * 2)
    torch.testing.assert_close(w.grad, x_ref * 2)


def test_a_graph_from_the_graph_cache_writes_in_place(tmp_path):
    torch.manual_seed(2)
    model = Net().train()
    options = {"strict": True, "codegen": "cpp", "cache_dir": str(tmp_path)}
    verdicts = []
    for _ in range(2):  # the second compile is served by the cache entry the first stored
        twin, ref = copy.deepcopy(model), copy.deepcopy(model)
        compiled = torchkiln.compile(twin, options=options)
        for _ in range(2):
            x = torch.randn(5, 3, 7, 7)
            before = _counts()
            out, expected = compiled(x), ref(x)
            assert _delta(before) == (0, 6)
            torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)
            out.sum().backward()
            expected.sum().backward()
        _same_buffers(twin, ref)
        verdicts.append(torchkiln.report(compiled).graphs[0].cache)
    assert verdicts == ["miss", "hit"]
