"""C++ kernels of the shapes that made the zoo's unet slow (issue 17): cat and padding masks on
the innermost index split into one vectorized loop per piece (codegen-cpp's _splits.py),
checked against eager on fresh random inputs with odd sizes, non-contiguous inputs and tails
that do not fill a vector."""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

loop_ir = pytest.importorskip("torchkiln_loop_ir")
codegen_cpp = pytest.importorskip("torchkiln_codegen_cpp")


@pytest.fixture(scope="module", autouse=True)
def _private_cache_dir(tmp_path_factory):
    old = os.environ.get("TORCHKILN_CACHE_DIR")
    os.environ["TORCHKILN_CACHE_DIR"] = str(tmp_path_factory.mktemp("cpu-kernel-cache"))
    yield
    if old is None:
        os.environ.pop("TORCHKILN_CACHE_DIR", None)
    else:
        os.environ["TORCHKILN_CACHE_DIR"] = old


def _check(fn, make_inputs, rtol=1e-5, atol=1e-5):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*make_inputs())
    cg = loop_ir.compile_graph(gm, list(make_inputs()), codegen_cpp.CppBackend())
    for _ in range(3):  # fresh inputs each call
        inputs = make_inputs()
        got, want = cg(*inputs), fn(*inputs)
        want = want if isinstance(want, tuple) else (want,)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
    return "\n".join(k.source for k in cg.kernels)


def _pieces(source: str, var: str) -> list[tuple[int, int]]:
    """The [start, end) of every constant-bounded loop over ``var`` in ``source``."""
    return [(int(a), int(b)) for a, b in
            re.findall(rf"for \(int64_t {var} = (\d+)LL; {var} < (\d+)LL; {var}\+\+\)", source)]


def test_cat_last_dim_splits_at_each_input():
    def f(a, b, c):
        return torch.cat([a.relu(), b * 2, c], dim=-1) + 1

    def inputs():
        return (torch.randn(3, 5, 7), torch.randn(3, 13, 5).transpose(1, 2), torch.randn(3, 5, 3))

    source = _check(f, inputs)
    assert _pieces(source, "x2") == [(0, 7), (7, 20), (20, 23)]


def test_constant_pad_splits_at_the_padding():
    def f(x):
        return F.pad(x.sigmoid(), (2, 3), value=-1.5)

    def inputs():
        return (torch.randn(4, 9, 11)[:, ::2],)

    source = _check(f, inputs)
    assert _pieces(source, "x2") == [(0, 2), (2, 13), (13, 16)]


def test_channels_last_upsample_cat_as_in_unet():
    def f(y, skip):
        y = F.hardswish(F.interpolate(y, scale_factor=2.0, mode="nearest"))
        return torch.cat([y, skip], dim=1).contiguous(memory_format=torch.channels_last)

    def inputs():
        y = torch.randn(2, 19, 5, 7).contiguous(memory_format=torch.channels_last)
        skip = torch.randn(2, 6, 10, 14).contiguous(memory_format=torch.channels_last)
        return y, skip

    source = _check(f, inputs)
    assert _pieces(source, "x3") == [(0, 19), (19, 25)]


def test_cat_with_a_broadcast_and_an_integer_input():
    def f(a, b):
        return torch.cat([a, b.expand(6, 4)], dim=1).to(torch.float32) * 0.5

    def inputs():
        return torch.randint(-9, 9, (6, 17)), torch.randint(-9, 9, (1, 4))

    source = _check(f, inputs)
    assert _pieces(source, "x1") == [(0, 17), (17, 21)]


def test_no_split_without_constant_masks():
    # an index compared with a loaded value (data-dependent) or nothing at all stays one loop
    def f(x, t):
        idx = torch.arange(x.shape[-1])
        return torch.where(idx < t, x, -x)

    def inputs():
        return torch.randn(5, 33), torch.randint(0, 33, (5, 1))

    source = _check(f, inputs)
    assert _pieces(source, "x1") == []


def test_zero_dim_and_one_dim_kernels():
    # no x-loop at all (a 0-d result) and a single loop over a cat: nothing to split / one loop
    def f(a, b):
        return (a * 2).sum() + 1, torch.cat([a, b]).exp(), a[0] * b[1]

    def inputs():
        return torch.randn(19), torch.randn(6)

    source = _check(f, inputs)
    assert _pieces(source, "x0") == [(0, 19), (19, 25)]


def test_masked_softmax_and_exp_at_the_underflow_edge():
    # where(mask, -inf, x) before exp: a bit blend (tk_where) keeps the loop vectorized, and
    # tk_exp answers the lanes that underflow; both must give eager's bits for every value
    def f(x, edge):
        n = x.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool).triu(1)
        att = torch.softmax((x * 0.25).masked_fill(causal, float("-inf")), -1)
        return att, torch.exp(edge), torch.sigmoid(-edge), torch.where(edge > 0, edge, -0.0).exp()

    edge = torch.tensor([-103.97, -103.98, -104.0, -104.01, -1e30, float("-inf"), float("inf"),
                         float("nan"), -0.0, 0.0, 88.7, 88.8, -87.4, -100.0, 1e-45, -1e-45, 3.0])

    def inputs():
        return torch.randn(2, 3, 33, 33), edge[torch.randperm(len(edge))]

    source = _check(f, inputs, rtol=1e-6, atol=0)
    assert "tk_where(" in source and "tk_exp(" in source
    x = torch.randn(1, 1, 33, 33)
    gm = make_fx(f, decomposition_table=loop_ir.decompositions())(x, edge)
    cg = loop_ir.compile_graph(gm, [x, edge], codegen_cpp.CppBackend())
    for got, want in zip(cg(x, edge)[1:], f(x, edge)[1:]):
        torch.testing.assert_close(got, want, rtol=2e-7, atol=0, equal_nan=True)
        assert torch.equal(got == 0, want == 0)  # underflow to 0 exactly where eager's does
