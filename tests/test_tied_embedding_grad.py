"""A tied embedding's weight gradient end to end (loop-ir's scatter_add_fold.py): the embedding's
scatter accumulates into the output projection's gradient instead of into zeros added to it.
A training step's gradients equal eager's on fresh random inputs, with repeated tokens, and
the backward graph's report says the fold was made."""

from __future__ import annotations

import copy

import torch
import torchkiln
from torch import nn


class TiedLM(nn.Module):
    def __init__(self, vocab=97, width=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)

    def forward(self, ids):
        h = torch.tanh(self.mix(self.embed(ids)))
        return h @ self.embed.weight.t()


def test_training_step_gradients_equal_eager_with_the_fold():
    torch.manual_seed(0)
    model = TiedLM()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(twin, options={"strict": True, "graph_cache": False})
    for _ in range(2):
        ids = torch.randint(0, 97, (3, 11))
        ids[:, :4] = 7  # a token repeated: its rows accumulate
        target = torch.randn(3, 11, 97)
        for m in (model, compiled):
            ((m(ids) - target) ** 2).mean().backward()
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)
    folds = [
        line
        for g in torchkiln.report(compiled).graphs
        for line in g.linears
        if "accumulates into" in line
    ]
    assert len(folds) == 1, torchkiln.report(compiled).graphs
