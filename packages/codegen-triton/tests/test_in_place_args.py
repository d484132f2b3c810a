"""A launch whose output is one of its inputs' memory (loop-ir writes a mutated graph input in
place) is never timed by autotuning (each timed run would apply the update again); the backend
declares that it takes such launches; results through the interpreter equal eager's."""

from __future__ import annotations

import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend
from torchkiln_codegen_triton.wrapper import _writes_an_input


def test_an_output_that_is_an_input_is_detected():
    a, b, out = torch.randn(4), torch.randn(4), torch.empty(4)
    assert _writes_an_input([a, b, a], 2, 3)  # inputs a, b; output a
    assert not _writes_an_input([a, b, out], 2, 3)
    assert not _writes_an_input([a, b, out, 7], 2, 3)  # a size argument is not a tensor


def test_running_statistics_written_in_place_through_triton(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    assert TritonBackend.supports_in_place_inputs

    def fn(x, rm, n):
        mean = x.mean(0)
        return x - mean, rm * 0.9 + mean * 0.1, n + 1

    inputs = [torch.randn(8, 5), torch.randn(5), torch.tensor(2)]
    gm = make_fx(fn, decomposition_table=L.decompositions())(*inputs)
    gm.meta["mutations_in_place"] = ((1, 1), (2, 2))
    cg = L.compile_graph(gm, inputs, TritonBackend())
    args = [t.clone() for t in inputs]
    expected = fn(*inputs)
    got = cg(*args)
    assert got[1] is args[1] and got[2] is args[2]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
