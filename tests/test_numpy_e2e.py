"""numpy code on tensors' values compiled end to end (issue 15): capture traces it into the graph
(one node per numpy call, running capture's own numpy table: numpy's semantics in torch
operations), aot-partition's make_fx traces those nodes into
ATen and the code generators compile them; strict, so a fallback fails the test. Results are
eager numpy's: ndarrays and numpy scalars with numpy's dtypes (float64 defaults included)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchkiln


def _same(actual, expected, where="out"):
    assert type(actual) is type(expected), (
        f"{where}: {type(actual).__name__} != {type(expected).__name__}"
    )
    if isinstance(expected, (np.ndarray, np.generic)):
        assert actual.dtype == expected.dtype, f"{where}: {actual.dtype} != {expected.dtype}"
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6, err_msg=where)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(actual, expected)
    else:
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _same(a, e, f"{where}[{i}]")


def numpy_block(x):
    a = x.numpy()
    b = np.exp(a) * 2 + np.sum(a, axis=0)
    c = np.clip(np.where(a > 0, a, 0.0), 0.1, 0.9)
    counts = (a > 0).astype(np.int64).sum(axis=1)
    return b, c.mean(), torch.from_numpy(np.tanh(a)) + x, counts, np.mean(counts)


def array_arguments(a, b, x):
    return np.matmul(a, b.T) - 1.5, np.linalg.norm(a, axis=1), x * 2


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_numpy_block_compiles_in_one_graph(codegen):
    compiled = torchkiln.compile(numpy_block, options={"strict": True, "codegen": codegen})
    for _ in range(3):
        x = torch.randn(8, 16)
        _same(compiled(x), numpy_block(x))
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks and not report.eager_fallbacks
    assert report.graphs[0].kernels >= 1


def test_numpy_array_arguments_are_graph_inputs():
    compiled = torchkiln.compile(array_arguments, options={"strict": True})
    for _ in range(3):
        args = (np.random.randn(4, 5), np.random.randn(3, 5), torch.randn(2))
        _same(compiled(*args), array_arguments(*args))
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks and not report.eager_fallbacks


def promotion_and_axes(x):
    """numpy's promotion (int / int is float64, an int32 mean is float64) and axis tuples."""
    i = (x * 10).int().numpy()
    a = x.numpy()
    return (
        i / 3,
        np.mean(i, axis=1),
        a.sum(axis=(0, 1), keepdims=True),
        np.std(a, axis=0, ddof=1),
        np.where(a > 0, i, 0.5),
        np.arange(4) * a[0],
    )


def test_numpy_table_promotion_compiles_in_one_graph():
    compiled = torchkiln.compile(promotion_and_axes, options={"strict": True, "codegen": "cpp"})
    for _ in range(3):
        x = torch.randn(6, 4)
        _same(compiled(x), promotion_and_axes(x))
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks and not report.eager_fallbacks


class ScaledEmbeddings(torch.nn.Module):
    """CTRL's ``inputs_embeds *= np.sqrt(self.d_model_size)``: a numpy function of a module's
    number is a numpy scalar capture knows, a constant of the graph (it broke the graph: an
    object passed to a torch operation)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.d_model_size = 64

    def forward(self, ids):
        h = self.embed(ids)
        h *= np.sqrt(self.d_model_size)
        return h.relu() + np.float32(0.5)


def test_a_numpy_scalar_of_a_module_attribute_is_a_constant_of_the_graph():
    model = ScaledEmbeddings()
    compiled = torchkiln.compile(model, options={"strict": True})
    for size in (64, 64, 100):  # the attribute is guarded: a new value compiles again
        model.d_model_size = size
        ids = torch.randint(0, 10, (3, 5))
        torch.testing.assert_close(compiled(ids), model(ids))
    report = torchkiln.report(compiled)
    assert report.num_graphs == 2 and not report.graph_breaks, report
