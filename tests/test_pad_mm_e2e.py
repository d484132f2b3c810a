"""Padded matrix multiplies end to end (loop-ir's pad_mm.py, forced on the CPU with
``pad_matmuls="always"``; it runs by default on CUDA): a language-model head with an unaligned
vocabulary and a tied embedding, inference and a training step, equal to eager on fresh random
inputs, gradients included; an inference graph's logits come back in the padded layout."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln
from torch import nn
from torchkiln_loop_ir import pad_mm


@pytest.fixture(autouse=True)
def _small_products(monkeypatch):
    monkeypatch.setattr(pad_mm, "MIN_WORK", 0)
    monkeypatch.setattr(pad_mm, "MAX_GROWTH", 2.0)


class TinyLM(nn.Module):
    def __init__(self, vocab=101, width=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, ids):
        h = self.norm(torch.tanh(self.mix(self.embed(ids))))
        return h @ self.embed.weight.t()  # tied output projection: N = vocab = 101


def _compile(model):
    return torchkiln.compile(
        model, options={"strict": True, "graph_cache": False, "loop_ir": {"pad_matmuls": "always"}}
    )


def _padded(compiled):
    return [
        line for g in torchkiln.report(compiled).graphs for line in g.linears if "padded to" in line
    ]


def test_inference_equals_eager():
    model = TinyLM().eval()
    ids = torch.randint(0, 101, (3, 7))
    compiled = _compile(model)
    with torch.no_grad():
        got, expected = compiled(ids), model(ids)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    # the logits come back as a view of the padded product (no copy back), as torch.compile's;
    # reshaping them as the user would still works
    assert got.stride() == (7 * 104, 104, 1)
    torch.testing.assert_close(got.view(-1, 101), expected.view(-1, 101), rtol=1e-4, atol=1e-5)
    assert _padded(compiled)


def _train_against_eager(compile_fn, batch, length):
    """Two training steps of a TinyLM and its compiled twin on fresh inputs (gradients
    accumulate): every gradient equal to eager's. Returns the compiled twin."""
    model = TinyLM()
    twin = copy.deepcopy(model)
    compiled = compile_fn(twin)
    for _ in range(2):
        ids = torch.randint(0, 101, (batch, length))
        target = torch.randn(batch, length, 101)
        (model(ids) - target).pow(2).mean().backward()
        (compiled(ids) - target).pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=name)
    return compiled


def test_training_step_gradients_equal_eager():
    assert _padded(_train_against_eager(_compile, 3, 7))


def _compile_output_only(model):
    options = {"pad_matmuls": "always", "pad_matmul_outputs_only": True}
    return torchkiln.compile(
        model, options={"strict": True, "graph_cache": False, "loop_ir": options}
    )


def _written_into_padded(compiled):
    return [
        line
        for g in torchkiln.report(compiled).graphs
        for line in g.linears
        if "written into an output padded" in line
    ]


def test_output_only_padding_equals_eager_and_copies_no_weight():
    """M (4 x 6) and K (24) aligned, N (101) not: the head's product is written into a (24, 104)
    output through its (24, 101) view, and the tied weight is read as it is."""
    model = TinyLM().eval()
    compiled = _compile_output_only(model)
    with torch.no_grad():
        for _ in range(2):
            ids = torch.randint(0, 101, (4, 6))
            got, expected = compiled(ids), model(ids)
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert got.stride() == (6 * 104, 104, 1)
    written = _written_into_padded(compiled)
    assert written and set(_padded(compiled)) == set(written)  # no operand padded
    (graph,) = torchkiln.report(compiled).graphs
    assert "aten.constant_pad_nd" not in " ".join(graph.extern_calls + graph.fallbacks)


def test_output_only_padding_in_a_training_step_equals_eager():
    """The forward's head is written into a padded output; the backward's products (K = 101,
    or an unaligned gradient) are padded as before. Gradients equal eager's."""
    assert _written_into_padded(_train_against_eager(_compile_output_only, 4, 6))
