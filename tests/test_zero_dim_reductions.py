"""Reductions of a 0-d tensor (``x.prod()``, ``x.argmin()``, ``x.var()`` of a scalar tensor):
compiled as a reduction over its one element (before: "lowering declined: empty reduction" and an
ATen fallback kernel), equal to eager's results, dtypes and NaNs, on the C++ backend and Triton's
interpreter, on fresh inputs."""

from __future__ import annotations

import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

L = pytest.importorskip("torchkiln_loop_ir")

REDUCTIONS = {
    "sum": lambda x: (x.sum(), x.sum(0, keepdim=True)),
    "prod": lambda x: (x.prod(), x.prod(-1)),
    "amax_amin": lambda x: (x.amax(), x.amin(0)),
    "argmax_argmin": lambda x: (x.argmax(), x.argmin(0, keepdim=True)),
    "max_min_dim": lambda x: (*x.max(0), *x.min(-1, keepdim=True)),
    "any_all": lambda x: (x.any(), x.all(0)),
    "mean_var": lambda x: (x.float().mean(), x.float().var(), x.float().var(correction=0)),
    "logsumexp": lambda x: (torch.logsumexp(x.float(), 0),),
}
DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool]
#: eager has no argmax/argmin of bool
REFUSED = {("argmax_argmin", torch.bool)}


def _backends():
    from torchkiln_codegen_cpp import CppBackend

    out = [pytest.param(CppBackend, id="cpp")]
    if os.environ.get("TRITON_INTERPRET") not in (None, "", "0"):
        from torchkiln_codegen_triton import TritonBackend

        out.append(pytest.param(TritonBackend, id="triton"))
    return out


def _value(dtype):
    if dtype == torch.bool:
        return torch.tensor(bool(torch.randint(0, 2, ()).item()))
    if dtype == torch.int64:
        return torch.randint(-5, 6, ())
    return torch.randn((), dtype=dtype) * 3


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_a_0d_tensor(name, dtype, backend):
    if (name, dtype) in REFUSED:
        with pytest.raises(RuntimeError):
            REDUCTIONS[name](_value(dtype))
        return
    f = REDUCTIONS[name]
    x = _value(dtype)
    gm = make_fx(f, decomposition_table=L.decompositions())(x)
    cg = L.compile_graph(gm, [x], backend())
    assert cg.fallbacks == [], cg.fallbacks  # every reduction compiled, none an ATen kernel
    for _ in range(3):  # fresh values
        x = _value(dtype)
        with torch.no_grad():
            want = f(x)
        got = cg(x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
            torch.testing.assert_close(g, w, equal_nan=True)


# Reductions over an empty dimension (the fuzzer's most common remaining ATen fallback): the
# reduction's identity, as eager gives it (max/min/argmax of nothing raise in eager, and stay ATen
# calls, which raise eager's error).
EMPTY = {
    "sum": lambda x: (x.sum(1), x.sum(1, keepdim=True), x.sum()),
    "prod": lambda x: (x.prod(1), x.prod()),
    "any_all": lambda x: (x.any(1), x.all(1), x.any(), x.all()),
    "mean": lambda x: (x.float().mean(1), x.float().mean()),
    "nansum": lambda x: (x.float().nansum(1),),
}


def _empty(dtype):
    if dtype == torch.bool:
        return torch.randint(0, 2, (3, 0)).bool()
    if dtype == torch.int64:
        return torch.randint(-5, 6, (3, 0))
    return torch.randn(3, 0, dtype=dtype)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_reduction_over_an_empty_dim(name, dtype, backend):
    f = EMPTY[name]
    x = _empty(dtype)
    gm = make_fx(f, decomposition_table=L.decompositions())(x)
    cg = L.compile_graph(gm, [x], backend())
    assert cg.fallbacks == [], cg.fallbacks  # compiled: the identity, no ATen kernel
    with torch.no_grad():
        want = f(x)
    got = cg(x)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        torch.testing.assert_close(g, w, equal_nan=True)


# Views of dims of size 0 (fuzz seeds 551065 and 551118, Triton): an index over such a dim
# divides by its size, 0. Before, the index simplifier raised ZeroDivisionError and the printer
# refused "modulus 0", and the graph ran eagerly. No point reaches such an index (the kernel is
# empty, or the load is the masked-off side of a cat).
def _transposed_empty(x, _unused):
    return x < (x >= 2.0)


def _cat_with_empty_side(x0, x1, x2, x3):
    t0 = torch.minimum(x2, x0)
    t3 = torch.cat([t0[1:2:3], t0], 0)
    return t3.to(torch.bool), t3, t0[x3]


def _inputs_551065():
    return torch.randn(2, 0, 0).permute(2, 1, 0), torch.zeros(3, dtype=torch.bool)


def _inputs_551118():
    return (
        torch.randn(3, 0),
        torch.randn(5, 3).t(),
        torch.randn((), dtype=torch.float64),
        torch.zeros(0, dtype=torch.int64),
    )


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize(
    "f, inputs",
    [(_transposed_empty, _inputs_551065), (_cat_with_empty_side, _inputs_551118)],
    ids=["transposed_empty", "cat_with_empty_side"],
)
def test_views_of_empty_dims_compile(f, inputs, backend):
    args = inputs()
    gm = make_fx(f, decomposition_table=L.decompositions())(*args)
    cg = L.compile_graph(gm, list(args), backend())
    for _ in range(2):
        args = inputs()
        want = f(*args)
        want = want if isinstance(want, tuple) else (want,)
        got = cg(*args)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
            torch.testing.assert_close(g, w)
