"""Helpers to build KernelSpecs by hand; every session compiles into its own temporary cache."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import sympy
import torch
from torchkiln_codegen_cpp import CppBackend
from torchkiln_loop_ir.backend import BufferSpec, KernelNode, KernelSpec, KernelStage


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory):
    old = os.environ.get("TORCHKILN_CACHE_DIR")
    # xdist workers of one run share a cache (its writes are race-safe), so each distinct
    # source is compiled once per run rather than once per worker.
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    cache = base / "torchkiln-cache"
    cache.mkdir(exist_ok=True)
    os.environ["TORCHKILN_CACHE_DIR"] = str(cache)
    yield
    if old is None:
        os.environ.pop("TORCHKILN_CACHE_DIR", None)
    else:
        os.environ["TORCHKILN_CACHE_DIR"] = old


def buf(name, size, dtype=torch.float32, stride=None):
    """A BufferSpec with contiguous strides unless ``stride`` is given."""
    size = tuple(sympy.sympify(s) for s in size)
    if stride is None:
        stride, acc = [], sympy.Integer(1)
        for s in reversed(size):
            stride.insert(0, acc)
            acc = acc * s
    return BufferSpec(
        name, dtype, torch.device("cpu"), size, tuple(sympy.sympify(s) for s in stride)
    )


def spec(name, xranges, rranges, stages, buffers, inputs, outputs, local=(), size_args=()):
    """``stages``: a list of (kind, [(buffer, body, is_reduction), ...])."""
    return KernelSpec(
        name=name,
        xranges=tuple(sympy.sympify(s) for s in xranges),
        rranges=tuple(sympy.sympify(s) for s in rranges),
        stages=tuple(
            KernelStage(kind, tuple(KernelNode(b, body, is_red) for b, body, is_red in nodes))
            for kind, nodes in stages
        ),
        buffers={b.name: b for b in buffers},
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        local_buffers=frozenset(local),
        size_args=tuple(size_args),
    )


def compile_one(kernel, options=None):
    return CppBackend(options).compile_kernels([kernel])[0]


@pytest.fixture(scope="session")
def kit():
    return SimpleNamespace(buf=buf, spec=spec, compile_one=compile_one, backend=CppBackend)


def compile_model(fn, **options):
    """``fn`` through the whole stack on this backend: strict, no graph cache."""
    import torchkiln

    return torchkiln.compile(
        fn, options={"strict": True, "graph_cache": False, "codegen": "cpp", **options}
    )


def kernel_sources(compiled) -> str:
    """The C++ source of every kernel library of ``compiled``'s graphs so far."""
    import torchkiln

    paths = [
        p
        for g in torchkiln.report(compiled).graphs
        for k, p in g.artifacts.items()
        if ".kernel." in k
    ]
    return "\n".join(open(p).read() for p in paths)


@pytest.fixture(scope="session")
def e2e():
    """Whole-model compiles whose generated C++ a test reads (``.compile``, ``.sources``)."""
    return SimpleNamespace(compile=compile_model, sources=kernel_sources)
