"""The per-call structure of a compiled CPU graph (issue 17): one foreign call per kernel, no
Python-level arithmetic or module lookups left in a static-shape wrapper's call, and the
inference runtime's fast path; every result checked against eager on fresh random inputs.
benchmarks/cpu_overhead.py measures the same layers' time."""

from __future__ import annotations

import ast

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

loop_ir = pytest.importorskip("torchkiln_loop_ir")
codegen_cpp = pytest.importorskip("torchkiln_codegen_cpp")

pytestmark = pytest.mark.usefixtures("private_cache_dir")  # tests/conftest.py


def _compile(fn, inputs):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    return loop_ir.compile_graph(gm, list(inputs), codegen_cpp.CppBackend())


def _softmax_chain(x):
    # each transposed read stops fusion: one kernel per softmax
    for _ in range(5):
        x = torch.softmax(x.t(), -1)
    return x


def _call_body(source: str) -> ast.FunctionDef:
    tree = ast.parse(source)
    make = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "make")
    return next(n for n in make.body if isinstance(n, ast.FunctionDef) and n.name == "call")


def test_one_foreign_call_per_kernel_launch():
    def strided():  # non-contiguous, with a storage offset (loop-ir compiles for these strides)
        return torch.randn(9, 7)[1:8, 1:6]

    cg = _compile(_softmax_chain, [strided()])
    assert cg.num_kernels == 5 and not cg.extern_calls
    counts = {}
    for kernel in cg.kernels:
        scope = kernel._launch.__globals__  # the launcher's own namespace (backend._make_launcher)
        foreign = scope["fn"]

        def counting(*args, _fn=foreign, _name=kernel.name):
            counts[_name] = counts.get(_name, 0) + 1
            return _fn(*args)

        scope["fn"] = counting
    for _ in range(3):
        x = strided()
        torch.testing.assert_close(cg(x)[0], _softmax_chain(x))
    assert counts == {k.name: 3 for k in cg.kernels}


def test_static_wrapper_call_does_no_arithmetic_or_module_lookups():
    def f(x, y):
        a = torch.relu(x[2:, 1:] @ y)  # a view with an offset, an extern, a kernel
        return torch.softmax(a.t(), -1) + 1, (x * 2).sum(0)

    def inputs():
        return [torch.randn(13, 11), torch.randn(10, 9)]

    cg = _compile(f, inputs())
    call = _call_body(cg.wrapper_source)
    binops = [ast.unparse(n) for n in ast.walk(call) if isinstance(n, ast.BinOp)]
    # only a view's storage offset adds at run time (offset + base.storage_offset())
    assert all("storage_offset()" in b for b in binops), binops
    lookups = [
        ast.unparse(n)
        for n in ast.walk(call)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "torch"
    ]
    assert lookups == []
    launched = [
        n.func.id
        for n in ast.walk(call)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id.startswith("kernel")
    ]
    assert sorted(launched) == sorted(k.name for k in cg.kernels)
    for _ in range(2):
        args = inputs()
        for got, want in zip(cg(*args), f(*args)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_view_offsets_follow_the_base_storage_offset():
    def f(x):
        # views at offset 16 and 0 of the input, returned as they are
        return (x[1:, 3:].t() * 2).sum(-1), x[2:5] + 1, x[2:5], x[:3, :4]

    cg = _compile(f, [torch.randn(6, 8)])
    assert "_as_strided(x_1, (3, 4), (8, 1))" in cg.wrapper_source  # offset 0: no arithmetic
    for _ in range(2):
        x = torch.randn(53)[5:].view(6, 8)  # storage offset 5 in the caller's tensor
        for got, want in zip(cg(x), f(x)):
            torch.testing.assert_close(got, want)


def test_compiled_module_inference_fast_path_matches_eager():
    torchkiln = pytest.importorskip("torchkiln")
    model = torch.nn.Sequential(
        torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 3)
    ).eval()
    compiled = torchkiln.compile(model)
    for requires_grad in (False, True):
        x = torch.randn(3, 5)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
        assert torch.is_grad_enabled()  # grad mode restored after the compiled call
        torch.set_grad_enabled(requires_grad)
        try:
            x = torch.randn(9, 5)[::2]
            torch.testing.assert_close(compiled(x), model(x))
            assert torch.is_grad_enabled() == requires_grad
        finally:
            torch.set_grad_enabled(True)

    def mutate(x, y):
        x.add_(1)
        return y * 2, x

    compiled_fn = torchkiln.compile(mutate)
    with torch.no_grad():
        x, y = torch.randn(4), torch.randn(3)
        x0 = x.clone()
        out, alias = compiled_fn(x, y)
        torch.testing.assert_close(x, x0 + 1)
        torch.testing.assert_close(out, y * 2)
        assert alias is x or alias.data_ptr() == x.data_ptr()
