"""loop-ir's real ``compile_graph`` driving the C++ backend, on ATen graphs made with make_fx,
checked against eager torch on fresh random inputs."""

from __future__ import annotations

import math

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

loop_ir = pytest.importorskip("torchkiln_loop_ir")
codegen_cpp = pytest.importorskip("torchkiln_codegen_cpp")

pytestmark = pytest.mark.usefixtures("private_cache_dir")  # tests/conftest.py


def _compile(fn, inputs):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    return loop_ir.compile_graph(gm, list(inputs), codegen_cpp.CppBackend())


def _check(fn, make_inputs, rtol=1e-4, atol=1e-4):
    cg = _compile(fn, make_inputs())
    assert cg.num_kernels == len(cg.kernels)
    assert all(k.path and k.path.endswith(".cpp") for k in cg.kernels)
    for _ in range(2):  # fresh inputs each call: the compiled graph is not tied to the examples
        inputs = make_inputs()
        got, expected = cg(*inputs), fn(*inputs)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
    return cg


def test_pointwise_broadcast_fuses_into_one_kernel():
    cg = _check(
        lambda x, y: (torch.relu(x + y) * 2, torch.exp(y)),
        lambda: (torch.randn(7, 257), torch.randn(257)),
    )
    assert cg.num_kernels >= 1 and not cg.fallbacks


def test_softmax_log_softmax_argmin():
    _check(
        lambda x: (torch.softmax(x, -1), torch.log_softmax(x, 1), torch.argmin(x, 0)),
        lambda: (torch.randn(33, 301) * 4,),
    )


def test_layer_norm_and_var_mean():
    _check(
        lambda x, w, b: (
            torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b),
            x.var(1),
            x.mean(0),
        ),
        lambda: (torch.randn(9, 65), torch.randn(65), torch.randn(65)),
    )


def test_reductions_with_nan_and_strided_dim0():
    def fn(x):
        masked = torch.where(x > 0, x, torch.full_like(x, math.nan))
        return masked.amax(0), x.sum(0), x.amax(1), x.argmax(1), torch.nan_to_num(x.log())

    _check(fn, lambda: (torch.randn(7, 257),))


def test_matmul_extern_then_fused_epilogue():
    cg = _check(
        lambda x, w: (torch.tanh(x @ w).sum(),), lambda: (torch.randn(8, 16), torch.randn(16, 4))
    )
    assert "aten.mm" in cg.extern_calls


def test_cat_embedding_gather():
    def fn(x, y, idx, table, gidx):
        return (
            torch.cat([x, y], 0) * 3,
            torch.nn.functional.embedding(idx, table) + 1,
            torch.gather(x, 1, gidx) * 2,
        )

    _check(
        fn,
        lambda: (
            torch.randn(7, 33),
            torch.randn(3, 33),
            torch.randint(0, 10, (5,)),
            torch.randn(10, 6),
            torch.randint(0, 33, (7, 5)),
        ),
    )


def test_int_bool_and_half_outputs():
    def fn(a, b, x):
        return (a * b + 3) // 2, a % 5, (a > b) & (b > 0), (x * 2).exp().to(torch.float16)

    _check(
        fn,
        lambda: (torch.randint(-50, 50, (33,)), torch.randint(-50, 50, (33,)), torch.randn(7, 9)),
        rtol=1e-3,
        atol=1e-3,
    )


def test_views_transpose_slice_and_3d_broadcast_reduction():
    def fn(x, a, b):
        return x.t().contiguous() + 1, x[:, 1:5] * 2, (a[:, None, :] * b[None, :, :]).sum(-1)

    _check(fn, lambda: (torch.randn(7, 257), torch.randn(5, 9), torch.randn(6, 9)))


def test_recompiling_the_same_graph_hits_the_cache(monkeypatch):
    from torchkiln_codegen_cpp import cache

    def fn(x):
        return (torch.sigmoid(x) * x,)

    first = _compile(fn, (torch.randn(5, 7),))

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler ran on a cache hit")

    monkeypatch.setattr(cache, "_run_compiler", no_compiler)
    second = _compile(fn, (torch.randn(5, 7),))
    assert [k.path for k in second.kernels] == [k.path for k in first.kernels]
    x = torch.randn(5, 7)
    torch.testing.assert_close(second(x)[0], torch.sigmoid(x) * x)
