"""Patterns of the ``kernels`` package (transformers 5.25 runs layers through it), each against
eager on fresh inputs:

- a function whose ``__signature__`` shows other parameters than its code's (``Func.forward(self,
  *args, **kwargs)`` shows its kernel's ``q, k, cos, sin``): its frame binds its code's own;
- a nested function compared by identity (``forward_func is not type(self).forward``): the
  answer is eager's, and a new function object is a new guard, not a stale answer;
- a bound method's ``__func__`` and ``__self__`` read inside the graph.
"""

from __future__ import annotations

import inspect
import types

import torch
from torch import nn
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.testing import RecordingBackend


def _make(func):
    class Func(nn.Module):
        def forward(self, *args, **kwargs):
            ref = REF[0]
            if ref is not type(self).forward:
                return func(*args, **kwargs) * 100
            return func(*args, **kwargs)

    return Func


REF: list = []


def test_a_nested_function_compared_by_identity_as_eager():
    cls = _make(torch.add)
    REF[:] = [cls.forward]
    m = cls()

    def f(x):
        return m(x, torch.ones(4)) + 1

    backend = RecordingBackend()
    cf = capture(f, backend)
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 1
    REF[:] = [_make(torch.add).forward]  # another function object: the other branch, as eager
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 2


def test_a_signature_attribute_does_not_rename_the_frame_parameters():
    def forward(self, *args, **kwargs):
        print("a break: this frame is captured on its own")
        return torch.add(*args, **kwargs) * 2

    # what the kernels package sets: the kernel's own parameters, self prepended
    forward.__signature__ = inspect.Signature(
        [
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for n in ("self", "q", "k", "alpha")
        ]
    )
    m = nn.Module()
    m.forward = types.MethodType(forward, m)

    def f(x, y):
        return m.forward(x, y, alpha=3) + 1

    cf = capture(f, RecordingBackend())
    for _ in range(2):
        x, y = torch.randn(4), torch.randn(4)
        torch.testing.assert_close(cf(x, y), f(x, y))
    # captured at the top, too
    top = capture(m.forward, RecordingBackend())
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(top(x, y, alpha=3), m.forward(x, y, alpha=3))


class Scaled(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


def test_a_bound_methods_func_and_self_in_one_graph():
    m = Scaled(3.0)

    def f(x):
        fn, owner = m.forward.__func__, m.forward.__self__
        return fn(owner, x) + (1.0 if fn is Scaled.forward else 2.0)

    backend = RecordingBackend()
    cf = capture(f, backend, fullgraph=True)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 1
