"""The wrapper's launch protocol (backend.StreamLaunch): with kernels that offer it, the wrapper
fetches the stream once per call and launches each kernel as ``launch_in(stream, *args)``; the
stream is None for the whole call once any tensor it hands a kernel is not 16-byte aligned (a
graph input, an extern's result) and was not allocated by the wrapper itself. Kernels here are
the reference backend's, wrapped to record what they were handed; results against eager."""

from __future__ import annotations

import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_loop_ir.backend import StreamLaunch


class RecordingKernel:
    """A reference kernel that follows StreamLaunch and records each launch's stream."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log
        self.name, self.source, self.path = inner.name, inner.source, inner.path

    def stream_for(self, device):
        self.log.append(("stream_for", device))
        return "S"

    def launch_in(self, stream, *args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if stream is not None:  # the wrapper vouches: every tensor aligned
            assert all(t.data_ptr() % 16 == 0 for t in tensors)
        self.log.append(("launch", stream))
        self.inner(*args)

    def __call__(self, *args):
        raise AssertionError("a StreamLaunch kernel is launched through launch_in")


class RecordingBackend(L.ReferenceBackend):
    def __init__(self):
        super().__init__()
        self.log = []

    def compile_kernels(self, kernels):
        return [RecordingKernel(k, self.log) for k in super().compile_kernels(kernels)]


def f(x, w):
    h = (x * 2).relu()
    y = h @ w  # an extern (mm) whose result a kernel reads
    return (y + x[:, :3].sum(1, keepdim=True)).tanh(), h.sum()


def _compile(x, w):
    gm = make_fx(f, decomposition_table=L.decompositions())(x, w)
    backend = RecordingBackend()
    cg = L.compile_graph(gm, [x, w], backend)
    assert all(isinstance(k, StreamLaunch) for k in cg.kernels) and len(cg.kernels) >= 2
    return cg, backend.log


def _check(cg, x, w):
    for got, want in zip(cg(x, w), f(x, w)):
        torch.testing.assert_close(got, want)


def test_stream_fetched_once_per_call_and_handed_to_every_kernel():
    x, w = torch.randn(8, 6), torch.randn(6, 5)
    cg, log = _compile(x, w)
    assert ".launch_in(_s, " in cg.wrapper_source and "_stream_for(dev0)" in cg.wrapper_source
    # the extern's result is checked where a kernel first takes it; the wrapper's own buffers not
    assert "data_ptr() & 15:" in cg.wrapper_source
    for _ in range(2):
        log.clear()
        _check(cg, x, w)
        assert log[0] == ("stream_for", torch.device("cpu"))
        assert [e for e in log if e[0] == "stream_for"] == [log[0]]
        assert [e for e in log if e[0] == "launch"] == [("launch", "S")] * len(cg.kernels)


def test_a_misaligned_input_takes_every_kernel_off_the_stream():
    x, w = torch.randn(8, 6), torch.randn(6, 5)
    cg, log = _compile(x, w)
    odd = torch.randn(8 * 6 + 1)[1:].view(8, 6)  # 4 bytes past an aligned allocation
    assert odd.data_ptr() % 16
    odd.copy_(x)
    log.clear()
    _check(cg, odd, w)
    assert [e for e in log if e[0] == "launch"] == [("launch", None)] * len(cg.kernels)
    log.clear()
    _check(cg, x, w)  # the next aligned call is back on the stream
    assert [e for e in log if e[0] == "launch"] == [("launch", "S")] * len(cg.kernels)


def test_kernels_without_the_protocol_are_called_directly():
    x, w = torch.randn(8, 6), torch.randn(6, 5)
    gm = make_fx(f, decomposition_table=L.decompositions())(x, w)
    cg = L.compile_graph(gm, [x, w], L.ReferenceBackend())
    assert "launch_in" not in cg.wrapper_source and "_stream_for" not in cg.wrapper_source
    _check(cg, x, w)


def test_a_graph_loaded_from_its_artifact_launches_the_same_way():
    """A cache entry keeps kernel steps without their buffers: the wrapper finds the kernels'
    device and dtypes in the graph's buffers and writes the same source."""
    from torchkiln_loop_ir.artifact import export_graph, load_graph

    class Saving(RecordingBackend):
        def export_kernels(self, kernels):
            return [k.inner for k in kernels]

        def load_kernels(self, exported, specs):
            return [RecordingKernel(k, self.log) for k in exported]

    x, w = torch.randn(8, 6), torch.randn(6, 5)
    gm = make_fx(f, decomposition_table=L.decompositions())(x, w)
    backend = Saving()
    cg = L.compile_graph(gm, [x, w], backend)
    loaded = load_graph(export_graph(cg, backend), backend)
    assert loaded.wrapper_source == cg.wrapper_source and ".launch_in(_s, " in loaded.wrapper_source
    backend.log.clear()
    _check(loaded, x, w)
    assert [e for e in backend.log if e[0] == "launch"] == [("launch", "S")] * len(cg.kernels)
