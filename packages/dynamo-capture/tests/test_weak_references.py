"""Calling a weak reference to a tensor (how ``nn.LSTM`` checks its weights) and
``torch.jit.annotate`` (a TorchScript hint, CrossViT's lists) stay in one graph."""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torchkiln_dynamo_capture import capture, explain
from torchkiln_dynamo_capture.testing import RecordingBackend


class Refs(nn.Module):
    """Holds weak references to its own weights, as RNNBase does (``_flat_weight_refs``)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.b = nn.Parameter(torch.randn(4))
        self.refs = [weakref.ref(self.w), weakref.ref(self.b)]

    def forward(self, x):
        changed = any(r() is not getattr(self, n) for r, n in zip(self.refs, ("w", "b")))
        w, b = (r() for r in self.refs)
        y = x @ w + b
        return y * 2 if changed else y


def test_a_weak_reference_to_a_weight_reads_it_in_the_graph():
    m = Refs()
    be = RecordingBackend()
    cm = capture(m, be, fullgraph=True)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.testing.assert_close(cm(x), m(x))
    assert be.calls == 1
    assert explain(m)(torch.randn(3, 4)).graph_break_count == 0


def test_a_weak_reference_pointing_elsewhere_recompiles():
    m = Refs()
    be = RecordingBackend()
    cm = capture(m, be)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cm(x), m(x))
    # the list is the same object; its reference now reaches another tensor: the referent's
    # identity guard fails, and the new capture sees the weights as changed (eager's branch)
    other = nn.Parameter(torch.randn(4, 4))
    m.refs[0] = weakref.ref(other)
    x = torch.randn(3, 4)
    torch.testing.assert_close(cm(x), m(x))
    assert be.calls == 2
    torch.testing.assert_close(m(x), (x @ other + m.b) * 2)


def test_a_dead_weak_reference_is_none():
    gone = torch.randn(2)
    ref = weakref.ref(gone)
    del gone

    class Dead(nn.Module):
        def __init__(self):
            super().__init__()
            self.ref = ref

        def forward(self, x):
            return x + 1 if self.ref() is None else x - 1

    m = Dead()
    be = RecordingBackend()
    x = torch.randn(3)
    torch.testing.assert_close(capture(m, be, fullgraph=True)(x), x + 1)
    assert be.calls == 1


def test_torch_jit_annotate_hands_its_value_back():
    def f(x):
        outs = torch.jit.annotate(list[torch.Tensor], [])
        for i in range(3):
            outs.append(x * i)
        return torch.stack(outs)

    be = RecordingBackend()
    cf = capture(f, be, fullgraph=True)
    x = torch.randn(5)
    torch.testing.assert_close(cf(x), f(x))
    assert be.calls == 1
