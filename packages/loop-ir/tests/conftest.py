"""Shared helpers: trace a function to an ATen graph, compile it, compare with eager."""

from __future__ import annotations

import pytest
import torch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx


def trace(fn, *inputs):
    return make_fx(fn, decomposition_table=L.decompositions())(*inputs)


def compile_fn(fn, *inputs, backend=None, options=None):
    gm = trace(fn, *inputs)
    return L.compile_graph(gm, list(inputs), backend or L.ReferenceBackend(), options)


def check(fn, *inputs, atol=1e-5, rtol=1.3e-6, backend=None, options=None, equal_nan=False):
    """Compile ``fn`` through loop-ir and compare every output with eager; return the compiled graph."""
    cg = compile_fn(fn, *inputs, backend=backend, options=options)
    expected = fn(*inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got = cg(*inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if isinstance(e, torch.Tensor):
            assert g.shape == e.shape, (g.shape, e.shape)
            assert g.dtype == e.dtype, (g.dtype, e.dtype)
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=equal_nan)
        else:
            assert g == e
    return cg


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))


@pytest.fixture(name="check")
def _check_fixture():
    return check


@pytest.fixture(name="compile_fn")
def _compile_fixture():
    return compile_fn


@pytest.fixture(name="trace")
def _trace_fixture():
    return trace
