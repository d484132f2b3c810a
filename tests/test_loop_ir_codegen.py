"""loop-ir through codegen-cpp: compile_graph with CppBackend against eager (and ReferenceBackend)."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_cpp import CppBackend


def _layernorm_gelu_residual(x, r, w, b):
    y = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    return (torch.nn.functional.gelu(y) + r,)


CASES = {
    "pointwise_sum": (lambda x, y: (((x * 2 + y).relu().sin()).sum(1),),
                      lambda: (torch.randn(7, 257), torch.randn(257)), 1),
    "layernorm_gelu_residual": (_layernorm_gelu_residual,
                                lambda: (torch.randn(7, 33), torch.randn(7, 33), torch.randn(33), torch.randn(33)), 1),
    "mm_bias_relu_mm": (lambda a, m1, m2, bias: (torch.relu(a @ m1 + bias) @ m2,),
                        lambda: (torch.randn(5, 8), torch.randn(8, 16), torch.randn(16, 3), torch.randn(16)), 1),
    "softmax_argmax_view": (lambda x: (torch.softmax(x, -1), x.argmax(1), x[:, 1:5].t() * 2),
                            lambda: (torch.randn(6, 9),), None),
    "embedding": (lambda w, i: (torch.nn.functional.embedding(i, w) * 2,),
                  lambda: (torch.randn(11, 5), torch.randint(0, 11, (3, 4))), 1),
    "scatter_add_index_put": (lambda x, i, s, r, v: (x.scatter_add(0, i, s) * 2,
                                                     torch.index_put(x, (r,), v, accumulate=True)),
                              lambda: (torch.randn(5, 4), torch.randint(0, 5, (7, 4)), torch.randn(7, 4),
                                       torch.randint(-5, 5, (6,)), torch.randn(6, 4)), None),
    "fp16_mean": (lambda x: (x.mean(1), (x * 2).to(torch.float32)),
                  lambda: (torch.randn(4, 65, dtype=torch.float16),), None),
}


class _Block(torch.nn.Module):
    """A pre-norm transformer block: layer norms over reshaped views, attention, MLP."""

    def __init__(self, d=16):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.f1, self.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], -1)
        x = x + self.o(torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ v)
        return x + self.f2(torch.nn.functional.gelu(self.f1(self.ln2(x))))


def test_transformer_block_with_cpp_backend():
    block = _Block()
    params = dict(block.named_parameters())

    def fn(x, *ps):
        return (torch.func.functional_call(block, dict(zip(params, ps)), (x,)),)

    inputs = [torch.randn(2, 9, 16), *[p.detach() for p in params.values()]]
    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=L.decompositions())(*inputs)
        cg = L.compile_graph(gm, inputs, CppBackend())
        x = torch.randn(2, 9, 16)
        torch.testing.assert_close(cg(x, *inputs[1:])[0], fn(x, *inputs[1:])[0], atol=1e-4, rtol=1e-4)
    assert cg.fallbacks == [] and "aten.bmm" in cg.extern_calls


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("name", sorted(CASES))
def test_compile_graph_with_cpp_backend(name):
    fn, make_inputs, kernels = CASES[name]
    inputs = make_inputs()
    gm = make_fx(fn, decomposition_table=L.decompositions())(*inputs)
    cg = L.compile_graph(gm, list(inputs), CppBackend())
    ref = L.compile_graph(gm, list(inputs), L.ReferenceBackend())
    fresh = [t.clone() if not t.is_floating_point() else torch.randn_like(t) for t in inputs]
    expected = fn(*fresh)
    tol = 2e-2 if any(t.dtype == torch.float16 for t in inputs) else 1e-4
    for got, via_ref, want in zip(cg(*fresh), ref(*fresh), expected):
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
        torch.testing.assert_close(got, via_ref, atol=tol, rtol=tol)
    if kernels is not None:
        assert cg.num_kernels == kernels
