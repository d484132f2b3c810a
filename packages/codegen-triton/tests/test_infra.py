"""The index printer, the source cache, typed errors and the backend's protocol surface."""

import os
from pathlib import Path

import pytest
import sympy
import torch
from _specs import buf, compile_one, spec
from torchkiln_codegen_triton import CodegenError, TritonBackend, TritonOpsHandler, kernel_source
from torchkiln_codegen_triton.printer import texpr
from torchkiln_loop_ir.backend import Backend, CompiledKernel
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing, index_symbol
from torchkiln_loop_ir.ops import ops

x0, x1 = index_symbol("x", 0), index_symbol("x", 1)
s0 = sympy.Symbol("s0", integer=True, positive=True)


def test_printer_matches_python_semantics():
    exprs = [
        FloorDiv(x0 + 3 * x1, 4),
        ModularIndexing(x0 * s0 + x1, 3, 5),
        sympy.Min(x0, x1 + 2) + sympy.Max(x0, 7),
        x0**2 - x1 + 2 * s0,
    ]
    texts = [texpr(e) for e in exprs]
    assert "//" in texts[0] and "%" in texts[1] and "tl.minimum" in texts[2]

    class tl:
        minimum, maximum = staticmethod(min), staticmethod(max)

    for a in range(6):
        for b in range(5):
            env = {"x0": a, "x1": b, "s0": 9, "tl": tl}
            ref = [
                (a + 3 * b) // 4,
                ((a * 9 + b) // 3) % 5,
                min(a, b + 2) + max(a, 7),
                a * a - b + 18,
            ]
            assert [eval(t, env) for t in texts] == ref


def _copy_kernel(name="copy"):
    def body(x, r):
        ops.store("out", x[0], ops.load("a", x[0]))

    return spec(
        name,
        (7,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", torch.float32, (7,)), buf("out", torch.float32, (7,))],
        ["a"],
        ["out"],
    )


def test_backend_protocol_and_content_addressed_cache(tmp_path):
    from torchkiln_codegen_triton import TritonOptions

    backend = TritonBackend(TritonOptions(cache_dir=str(tmp_path)))
    assert (
        isinstance(backend, Backend) and backend.name == "triton" and backend.device_type == "cuda"
    )
    assert backend.capabilities.reduction_broadcast_reduction
    k1, k2 = backend.compile_kernels([_copy_kernel(), _copy_kernel()])
    assert isinstance(k1, CompiledKernel)
    assert k1.path == k2.path and k1.path.startswith(str(tmp_path / "triton"))
    assert os.path.basename(k1.path).endswith(".py") and Path(k1.path).read_text() == k1.source
    assert kernel_source(_copy_kernel()) == k1.source
    a, out = torch.randn(7), torch.empty(7)
    k2(a, out)
    torch.testing.assert_close(out, a)


def test_errors_are_typed_and_point_at_source():
    def bad(x, r):
        ops.store("nowhere", x[0], ops.load("a", x[0]))

    k = spec(
        "bad",
        (7,),
        (),
        [("loop", [("nowhere", bad, False)])],
        [buf("a", torch.float32, (7,)), buf("nowhere", torch.float32, (7,))],
        ["a"],
        [],
    )
    with pytest.raises(CodegenError, match="neither an output nor a local buffer"):
        compile_one(k)

    ck = compile_one(_copy_kernel("wrong_args"))
    with pytest.raises(CodegenError) as info:
        ck(torch.randn(7))  # the output tensor is missing
    assert info.value.path == ck.path and ck.path in str(info.value)


def test_handler_is_exported_and_emits_cse_lines():
    from torchkiln_codegen_triton import TritonOptions
    from torchkiln_codegen_triton._assemble import arg_names
    from torchkiln_loop_ir.ops import set_ops_handler

    k = _copy_kernel()
    h = TritonOpsHandler(
        k, arg_names(k), reduction=False, looped=False, options=TritonOptions(), interpret=True
    )
    h.declare_symbol(x0, frozenset({"x"}))
    h.begin_stage(False)
    with set_ops_handler(h):
        a = ops.load("a", x0)
        assert ops.load("a", x0) is a  # loads are CSE'd
        b = ops.add(a, a)
        assert ops.add(a, a) is b
    lines = h.stages[0].prefix
    assert lines == [
        f"{a.name} = tl.load(in_ptr0 + (x0), xmask, other=0)",
        f"{b.name} = {a.name} + {a.name}",
    ]


def test_handler_implements_every_op_of_the_contract():
    from torchkiln_loop_ir.ops import ALL_OPS

    missing = sorted(op for op in ALL_OPS if not callable(getattr(TritonOpsHandler, op, None)))
    assert missing == []


def test_exported_kernels_load_back_without_codegen(tmp_path):
    # the graph cache's path: load_kernels called helpers removed when the code cache moved to
    # loop-ir (NameError: every cached Triton graph was compiled again)
    from torchkiln_codegen_triton import TritonOptions

    backend = TritonBackend(TritonOptions(cache_dir=str(tmp_path)))
    k = _copy_kernel("exported")
    (loaded,) = backend.load_kernels(backend.export_kernels(backend.compile_kernels([k])), [k])
    a, out = torch.randn(7), torch.empty(7)
    loaded(a, out)
    torch.testing.assert_close(out, a)


def test_codegen_error_is_loop_ir_codegen_error():
    from torchkiln_loop_ir import CodegenError as BaseCodegenError

    err = CodegenError("kernel k failed", "/tmp/k.py")
    assert isinstance(err, BaseCodegenError) and isinstance(err, RuntimeError)
    assert err.path == "/tmp/k.py" and "/tmp/k.py" in str(err)
