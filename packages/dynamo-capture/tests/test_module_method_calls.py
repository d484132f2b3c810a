"""A torch.nn module's method called unbound on a module (``nn.LayerNorm.forward(self, x)`` in a
subclass's forward, as SqueezeBERT's NCW layer norm does) is inlined like the module's own call:
one graph, eager's values and gradients. It broke the graph before ("passing a
NNModuleVariable to a torch operation"), once per layer."""

from __future__ import annotations

import torch
from torch import nn
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.testing import RecordingBackend


class ChannelsFirstNorm(nn.LayerNorm):
    def forward(self, x):
        return nn.LayerNorm.forward(self, x.permute(0, 2, 1)).permute(0, 2, 1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = ChannelsFirstNorm(8)
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        h = self.norm(x)
        return nn.Linear.forward(self.proj, h.transpose(1, 2)).relu()


def test_unbound_module_methods_are_inlined():
    torch.manual_seed(0)
    block = Block()
    backend = RecordingBackend()
    captured = capture(block, backend)
    for _ in range(2):
        x = torch.randn(2, 8, 5, requires_grad=True)
        xe = x.detach().clone().requires_grad_(True)
        out, expected = captured(x), block(xe)
        torch.testing.assert_close(out, expected)
        out.sum().backward()
        expected.sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
    assert backend.calls == 1


def test_a_parametrized_weight_is_computed_in_the_graph():
    """``weight_norm`` (torch.nn.utils.parametrizations, wav2vec2's positional convolution): the
    weight is a property computing it from ``original0`` / ``original1``; it broke the graph
    ("calling get_parametrized with arguments not known at capture time")."""
    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 3, padding=1), dim=2), nn.GELU()
    )
    backend = RecordingBackend()
    captured = capture(conv, backend)
    for _ in range(2):
        x = torch.randn(2, 4, 9)
        out, expected = captured(x), conv(x)
        torch.testing.assert_close(out, expected)
        out.square().sum().backward()
        got = [p.grad.clone() for p in conv.parameters()]
        conv.zero_grad()
        expected.square().sum().backward()
        for g, p in zip(got, conv.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad)
        conv.zero_grad()
    assert backend.calls == 1
