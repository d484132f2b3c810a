"""The on-disk cache (a second build of the same source does not run the compiler) and typed
compiler errors."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from torchkiln_codegen_cpp import CodegenError, CppBackend, CppOptions
from torchkiln_codegen_cpp import cache as cache_mod
from torchkiln_loop_ir.ops import ops


def _scale_kernel(kit, factor, name="scale"):
    def body(x, r):
        ops.store("out", x[0], ops.mul(ops.load("a", x[0]), ops.constant(factor, torch.float32)))

    return kit.spec(
        name,
        (31,),
        (),
        [("loop", [("out", body, False)])],
        [kit.buf("a", (31,)), kit.buf("out", (31,))],
        ("a",),
        ("out",),
    )


def test_second_compile_hits_the_cache(kit, monkeypatch, tmp_path):
    options = CppOptions(cache_dir=str(tmp_path))
    first = CppBackend(options).compile_kernels([_scale_kernel(kit, 2.5)])[0]
    assert Path(first.path).is_file() and Path(first.path).parent.parent == tmp_path / "cpp"
    assert not [p for p in (tmp_path / "cpp").iterdir() if p.name.startswith("tmp-")]

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler ran on a cache hit")

    monkeypatch.setattr(cache_mod, "_run_compiler", no_compiler)
    second = CppBackend(options).compile_kernels([_scale_kernel(kit, 2.5)])[0]
    assert second.path == first.path
    a = torch.randn(31)
    out = torch.empty(31)
    second(a, out)
    torch.testing.assert_close(out, a * 2.5)
    # different flags are a different key: that one would have to compile
    with pytest.raises(AssertionError, match="compiler ran"):
        CppBackend(
            CppOptions(cache_dir=str(tmp_path), flags=(*options.flags, "-DX=1"))
        ).compile_kernels([_scale_kernel(kit, 2.5)])


def test_env_var_selects_cache_dir_and_concurrent_builds_agree(kit, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    results, errors = [], []

    def build():
        try:
            results.append(CppBackend().compile_kernels([_scale_kernel(kit, -1.5, "neg")])[0])
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results[0].path == results[1].path and results[0].path.startswith(str(tmp_path))
    assert sorted(os.listdir(Path(results[0].path).parent)) == [
        "MANIFEST",
        "kernel.cpp",
        "kernel.so",
    ]
    a = torch.randn(31)
    out = torch.empty(31)
    results[1](a, out)
    torch.testing.assert_close(out, a * -1.5)


def test_compiler_failure_is_a_codegen_error(tmp_path):
    options = CppOptions(cache_dir=str(tmp_path))
    with pytest.raises(CodegenError) as info:
        cache_mod.build_library('extern "C" void broken() { this is not C++; }\n', options)
    err = info.value
    assert err.source_path and Path(err.source_path).read_text().startswith(
        'extern "C" void broken'
    )
    assert "error" in err.stderr_tail
    assert err.source_path in str(err)


def test_bad_kernel_spec_is_a_codegen_error(kit):
    def body(x, r):
        ops.store("out", x[0], ops.load("missing", x[0]))

    bad = kit.spec(
        "bad",
        (4,),
        (),
        [("loop", [("out", body, False)])],
        [kit.buf("out", (4,)), kit.buf("missing", (4,))],
        (),
        ("out",),
    )
    with pytest.raises(CodegenError, match="neither an input nor an output"):
        CppBackend().compile_kernels([bad])


def test_missing_compiler_is_a_codegen_error(kit, tmp_path):
    options = CppOptions(compiler="/nonexistent/g++", cache_dir=str(tmp_path))
    with pytest.raises(CodegenError, match="cannot run the C\\+\\+ compiler"):
        CppBackend(options).compile_kernels([_scale_kernel(kit, 3.0)])


def test_backend_protocol_and_call_checks(kit):
    from torchkiln_loop_ir.backend import Backend, CompiledKernel

    backend = CppBackend()
    assert isinstance(backend, Backend)
    assert backend.name == "cpp" and backend.device_type == "cpu"
    assert backend.capabilities.reduction_broadcast_reduction
    assert backend.compile_kernels([]) == []
    k = backend.compile_kernels([_scale_kernel(kit, 0.25, "quarter")])[0]
    assert isinstance(k, CompiledKernel) and k.name == "quarter"
    with pytest.raises(TypeError, match="takes 2 arguments"):
        k(torch.empty(31))
    with pytest.raises(TypeError, match="takes 2 arguments, got 3"):
        k(torch.empty(31), torch.empty(31), torch.empty(31))
    a = torch.randn(31)
    out = torch.empty(31)
    k(a, out)
    torch.testing.assert_close(out, a * 0.25)


def test_unknown_op_is_a_codegen_error(kit):
    from torchkiln_codegen_cpp import CppOpsHandler

    def body(x, r):
        ops.store("out", x[0], ops.frobnicate(ops.load("a", x[0])))

    bad = kit.spec("unknown_op", (4,), (), [("loop", [("out", body, False)])],
                   [kit.buf("a", (4,)), kit.buf("out", (4,))], ("a",), ("out",))  # fmt: skip
    with pytest.raises(CodegenError, match="no op 'frobnicate'"):
        CppBackend().compile_kernels([bad])
    handler = CppOpsHandler(bad)
    assert not hasattr(handler, "frobnicate") and hasattr(handler, "exp")


def test_native_builds_are_keyed_by_the_host_cpu(monkeypatch):
    source = 'extern "C" void f() {}\n'
    native = CppOptions()
    portable = CppOptions(flags=tuple(f for f in native.flags if "native" not in f))
    assert any("native" in f for f in native.flags)
    keys = {}
    for cpu in ("avx2 fma", "avx512f avx2 fma"):
        monkeypatch.setattr(cache_mod, "host_cpu_features", lambda cpu=cpu: cpu)
        keys[cpu] = (cache_mod.cache_key(source, native), cache_mod.cache_key(source, portable))
    (native_a, portable_a), (native_b, portable_b) = keys.values()
    assert native_a != native_b  # another CPU: another library for -march=native
    assert portable_a == portable_b  # portable flags: one library serves every CPU


def test_compiler_errors_are_loop_ir_codegen_errors():
    from torchkiln_codegen_cpp.errors import UnsupportedOp
    from torchkiln_loop_ir import CodegenError as BaseCodegenError

    err = CodegenError("failed", source_path="/tmp/k.cpp", stderr_tail="error: x")
    assert isinstance(err, BaseCodegenError) and isinstance(err, RuntimeError)
    assert (
        err.path == err.source_path == "/tmp/k.cpp"
        and err.stderr_tail == err.tool_output == "error: x"
    )
    assert "/tmp/k.cpp" in str(err) and "error: x" in str(err)
    assert issubclass(UnsupportedOp, BaseCodegenError) and issubclass(UnsupportedOp, AttributeError)
