"""Shared helpers: C1-like graphs from fx.symbolic_trace and a checking fw/bw compiler."""

from __future__ import annotations

import os
import sys

import pytest
import torch
from torch import fx
from torchkiln_aot_partition import check_functional

sys.path.insert(0, os.path.dirname(__file__))  # the _aot_test_modules helper module


class RecordingCompiler:
    """A fw/bw compiler that checks contract C2 and runs the graph as is (tests only this layer)."""

    def __init__(self):
        self.graphs: list[fx.GraphModule] = []
        self.example_inputs: list[list[torch.Tensor]] = []

    def __call__(self, gm: fx.GraphModule, example_inputs):
        check_functional(gm)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        assert len(placeholders) == len(example_inputs)
        for node, ex in zip(placeholders, example_inputs):
            val = node.meta["val"]
            assert val.dim() == ex.dim() and val.dtype == ex.dtype, node.name
            # Static sizes must match the example; symbolic ones hold for any size.
            static = [(v, e) for v, e in zip(val.shape, ex.shape) if isinstance(v, int)]
            assert all(v == e for v, e in static), node.name
            assert not isinstance(ex, torch._subclasses.fake_tensor.FakeTensor)
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward


@pytest.fixture
def compiler():
    return RecordingCompiler()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class _InlineModules(fx.Tracer):
    """Traces through every submodule, so parameters become get_attr nodes as in capture's graphs."""

    proxy_buffer_attributes = True

    def is_leaf_module(self, m, qualname):
        return False


def _capture(fn) -> fx.GraphModule:
    root = fn if isinstance(fn, torch.nn.Module) else torch.nn.Module()
    graph = _InlineModules().trace(fn)
    return fx.GraphModule(root, graph)


@pytest.fixture
def capture():
    """A torch-level graph in the shape capture (contract C1) produces."""
    return _capture
