"""``as_strided`` views and the layout passes (mkldnn.py's ``layout_copy`` and
``_drop_restrides``, channels_last.py's ``adopt_input_strides``): a view that only restrides its
input is dropped, its uses reading the input, so a graph whose values come in other strides
still computes the traced values; a view of other elements is kept, and a backward whose saved
input changed strides under it is refused with a ``LoweringError`` rather than read wrong."""

from __future__ import annotations

import pytest
import torch
from torch import fx
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_loop_ir import channels_last as CL
from torchkiln_loop_ir import mkldnn
from torchkiln_loop_ir.errors import LoweringError

aten = torch.ops.aten


def _traced(fn, *args) -> fx.GraphModule:
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert any(n.target in mkldnn._STORAGE_OPS for n in gm.graph.nodes)
    return gm


def _storage_ops(gm: fx.GraphModule) -> int:
    return sum(n.target in mkldnn._STORAGE_OPS for n in gm.graph.nodes)


def test_a_restride_is_dropped_and_the_values_stay():
    """``aten.as_strided(x, x.shape, strides equal on every dim above 1)`` reads x's elements
    as x holds them: dropped, the graph computes the same values from a channels-last x."""

    def fn(x):
        y = x * 2
        n, c, h, w = y.shape
        z = aten.as_strided(y, [n, c, h, w], [c * h * w, h * w, w, 1])
        return z + 1

    x = torch.randn(2, 4, 3, 5)
    gm = _traced(fn, x)
    adopted, log = CL.adopt_input_strides(gm, [x.contiguous(memory_format=torch.channels_last)], 1)
    assert log and _storage_ops(adopted) == 0
    cl = x.contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(adopted(cl), fn(x))


def test_a_mean_restrided_to_channels_last_is_dropped():
    """ATen's ``adaptive_avg_pool2d`` to one pixel of a channels-last input: its ``(N, C, 1,
    1)`` mean restrided to ``(C, 1, C, C)``; only size-1 dims differ."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    mean = graph.call_function(aten.mean.dim, (x, [-1, -2], True))
    view = graph.call_function(aten.as_strided.default, (mean, [2, 8, 1, 1], [8, 1, 8, 8]))
    graph.output(graph.call_function(aten.mul.Tensor, (view, 3.0)))
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        x.meta["val"] = torch.empty(2, 8, 4, 4)
    mkldnn._propagate_meta(graph, mode)
    mkldnn._drop_restrides(graph)
    assert _storage_ops(fx.GraphModule({}, graph)) == 0


def test_a_view_of_other_elements_is_kept_and_refused_when_its_input_moves():
    """A transpose written as strides depends on the memory order: ``_drop_restrides`` keeps
    it, and a backward whose saved input changed strides under it is refused."""

    def fn(x):
        n, c, h, w = x.shape
        return aten.as_strided(x, [n, c, w, h], [c * h * w, h * w, 1, w]) * 2

    x = torch.randn(2, 4, 3, 5)
    gm = _traced(fn, x)
    graph, _ = mkldnn.copied_graph(gm)
    mkldnn._drop_restrides(graph)
    assert _storage_ops(fx.GraphModule(gm, graph)) == 1
    with pytest.raises(LoweringError, match="as_strided"):
        CL.adopt_input_strides(gm, [x.contiguous(memory_format=torch.channels_last)], 1)
    # the traced strides: nothing to adopt, the view stays
    same, log = CL.adopt_input_strides(gm, [x], 1)
    assert same is gm and log == ()
