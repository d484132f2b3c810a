"""16-bit intermediates keep their rounding on a GPU (``_prelude._tk_rounded``).

Eager computes ``x * s + b`` in bfloat16 as two ops, rounding the product to bfloat16 before the
add. The kernel's source does the same (``(x * s).to(tl.bfloat16).to(tl.float32) + b``), but
LLVM's NVPTX backend narrowed that float32 product and sum into one ``fma.rn.bf16``: on the
H200, 30% of the values of ``x * s + b`` were one bfloat16 step off eager's, and a softmax of it
17 steps (session 19, ``benchmarks/results/gpu-2026-12-03-session19``). The widening of a value
the kernel rounded now goes through an opaque copy of the 16-bit value (two values a 32-bit
copy, so the conversions stay packed: a bfloat16 chain of five ops took 33.5 sm_90 instructions
a value with a copy of each widened value, 21.5 with this). The GPU form is compiled here for
sm_90 by Triton's own compiler (no GPU needed) and its PTX read; the interpreter's form is
compared with eager bit for bit."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from _specs import buf, compile_one, compiled_for_gpu, spec
from torchkiln_codegen_triton._compat import interpreting
from torchkiln_loop_ir.ops import ops

F32 = torch.float32
N = 4096


def _affine(dtype: torch.dtype):
    """out = dtype(dtype(a * s) + b), each operand widened to float32: what loop-ir lowers
    eager's ``a * s + b`` of 16-bit tensors to."""

    def body(x, r):
        def wide(name):
            return ops.to_dtype(ops.load(name, x[0]), F32, dtype)

        product = ops.to_dtype(ops.to_dtype(ops.mul(wide("a"), wide("s")), dtype, F32), F32, dtype)
        ops.store("out", x[0], ops.to_dtype(ops.add(product, wide("b")), dtype, F32))

    names = ("a", "s", "b")
    return spec(
        f"affine_{str(dtype)[6:]}",
        (N,),
        (),
        [("pointwise", [("out", body, False)])],
        [buf(n, dtype, [N]) for n in names] + [buf("out", dtype, [N])],
        list(names),
        ["out"],
    )


def _ptx_main() -> None:
    """Print, for bfloat16 and float16, the GPU form's source and its sm_90 PTX's float ops."""
    import importlib.util
    import re
    from collections import Counter

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for dtype, short in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        k = compile_one(_affine(dtype))
        mod_spec = importlib.util.spec_from_file_location(f"tk_round_{short}", k.path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        mod_spec.loader.exec_module(module)
        jit = getattr(module, k.function_name)
        sig = {
            p: "constexpr" if p == "XBLOCK" else "i32" if p == "xnumel" else f"*{short}"
            for p in jit.arg_names
        }
        compiled = triton.compile(
            ASTSource(jit, sig, {"XBLOCK": k.config.xblock}),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": k.config.num_warps},
        )
        ops_ = Counter(re.findall(r"^\s*((?:fma|mul|add|cvt)\.[\w.]+)", compiled.asm["ptx"], re.M))
        print(json.dumps({"dtype": short, "source": k.source, "ops": dict(ops_)}))


def test_the_gpu_form_rounds_the_product_before_the_add(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    rows = compiled_for_gpu("import test_rounding_kept as t; t._ptx_main()", tmp_path)
    assert [r["dtype"] for r in rows] == ["bf16", "fp16"], rows
    for row in rows:
        ptx_ops = row["ops"]
        ptx_type = {"bf16": "bf16", "fp16": "f16"}[row["dtype"]]
        body = row["source"][row["source"].index("def tk_") :]
        # the rounded product is widened through the opaque copy; the loads' widenings (exact)
        # are not
        assert body.count("_tk_rounded(") == 1, body
        assert all("_tk_rounded" not in ln for ln in body.splitlines() if "tl.load" in ln)
        # no fused multiply-add of the unrounded product ...
        assert not any(op.startswith("fma") for op in ptx_ops), ptx_ops
        # ... but a multiply and an add, each rounded on its own: in float32 with a conversion
        # after it, or as one 16-bit op (mul.bf16x2, add.bf16: one rounding of the exact
        # result, which is what eager's float32 op then its rounding give, float32 having more
        # than twice a 16-bit float's bits)
        floats = ("f32", ptx_type, f"{ptx_type}x2")
        assert any(op.startswith("mul.") and op.split(".")[-1] in floats for op in ptx_ops), ptx_ops
        adds = [op for op in ptx_ops if op.startswith("add.") and op.split(".")[-1] in floats]
        assert adds, ptx_ops
        if any(op.endswith(".f32") for op in adds):
            assert ptx_ops.get(f"cvt.rn.{ptx_type}.f32") or ptx_ops.get(
                f"cvt.rn.{ptx_type}x2.f32"
            ), ptx_ops


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_the_kernel_matches_eager_bit_for_bit(dtype):
    """The kernel (the interpreter's form on a CPU, the GPU form on a GPU) against eager's two
    ops, on fresh random inputs whose products need rounding."""
    k = compile_one(_affine(dtype))
    for _ in range(2):
        a, s, b = (torch.randn(N, dtype=dtype) * 3 for _ in range(3))
        out = torch.empty(N, dtype=dtype)
        k(a, s, b, out)
        assert torch.equal(out, a * s + b)


def _rounded_store(dtype: torch.dtype):
    """out = dtype(a * s), widened to float32 and stored to a ``dtype`` buffer: what loop-ir
    lowers a 16-bit product that a kernel's last op writes (``(a * s).to(bf16).to(f32)``)."""

    def body(x, r):
        def wide(name):
            return ops.to_dtype(ops.load(name, x[0]), F32, dtype)

        product = ops.to_dtype(ops.to_dtype(ops.mul(wide("a"), wide("s")), dtype, F32), F32, dtype)
        ops.store("out", x[0], product)

    return spec(
        f"rounded_store_{str(dtype)[6:]}",
        (N,),
        (),
        [("pointwise", [("out", body, False)])],
        [buf(n, dtype, [N]) for n in ("a", "s", "out")],
        ["a", "s"],
        ["out"],
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_widened_value_is_stored_as_the_rounded_value(dtype):
    """Storing ``x.to(bf16).to(f32)`` to a bfloat16 buffer stores ``x.to(bf16)``: one rounding,
    not a second narrowing of the widened value (which ``_tk_rounded``'s opaque copy keeps the
    GPU compiler from folding: two instructions a value in every 16-bit kernel's last store).
    The result is eager's bit for bit."""
    k = compile_one(_rounded_store(dtype))
    body = k.source[k.source.index("def tk_") :]
    # the interpreter narrows to bfloat16 through the bits (its own conversion flushes
    # subnormals); a GPU's form is Triton's conversion
    interpreter_bf16 = dtype == torch.bfloat16 and interpreting()
    narrow = "_tk_f32_to_bf16(" if interpreter_bf16 else f".to(tl.{str(dtype)[6:]})"
    assert body.count(narrow) == 1, body
    for _ in range(2):
        a, s = (torch.randn(N, dtype=dtype) * 3 for _ in range(2))
        out = torch.empty(N, dtype=dtype)
        k(a, s, out)
        assert torch.equal(out, a * s)
