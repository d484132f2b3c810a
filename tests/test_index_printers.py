"""The C++ and Triton index printers give loop-IR's shared semantics (torchkiln_loop_ir.index_printer):
the same sympy expressions, printed by each, compiled by g++ and run by Triton's interpreter on
random integers (negative numerators for floor division and moduli included), equal sympy's
values. C and Triton divide toward zero, sympy toward minus infinity: that is what this checks."""

from __future__ import annotations

import ctypes
import functools
import os
import random
import zlib

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import sympy
import torch

loop_ir = pytest.importorskip("torchkiln_loop_ir")
from torchkiln_loop_ir.codecache import CodeCache, source_module  # noqa: E402
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing, index_symbol  # noqa: E402

x0, x1, s0 = index_symbol("x", 0), index_symbol("x", 1), index_symbol("s", 0)
n = sympy.Symbol("n", integer=True)  # no sign: numerators below zero
SYMBOLS = (n, x0, x1, s0)
SAMPLES = 64  # a power of two: one Triton block

EXPRESSIONS = [
    FloorDiv(n, 3),
    FloorDiv(n - 5, 4),
    FloorDiv(x0 - x1, 3),
    FloorDiv(x0 + 3 * x1, s0),
    FloorDiv(FloorDiv(n, 2) - 1, 3),
    ModularIndexing(n, 2, 5),
    ModularIndexing(x0 - 20, 3, 7),
    ModularIndexing(x0, s0, 4),
    sympy.Mod(n, 6),
    sympy.Mod(x0 - x1, s0),
    sympy.Min(x0, s0, 7) - sympy.Max(n, -3),
    sympy.floor(n / 3),
    sympy.ceiling(n / 4),
    sympy.ceiling(x0 / s0),
    sympy.Piecewise((x0 - 1, x0 > x1), (n, True)),
    sympy.And(x0 < s0, sympy.Ne(n, 2)),
    sympy.Or(n >= 0, sympy.Eq(x1, 3)),
    sympy.Not(sympy.And(x0 < s0, n > 2), evaluate=False),
    (x0 - 3) ** 2 + 2 - 3 * n,
]
IDS = [str(e) for e in EXPRESSIONS]


@functools.cache
def samples(i: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Random values of the symbols (their assumptions hold: loop variables >= 0, sizes >= 1)
    and sympy's value of expression ``i`` at each."""
    rng = random.Random(zlib.crc32(IDS[i].encode()))
    rows = [
        {
            n: rng.randint(-60, 60),
            x0: rng.randint(0, 60),
            x1: rng.randint(0, 60),
            s0: rng.randint(1, 20),
        }
        for _ in range(SAMPLES)
    ]
    want = []
    for values in rows:
        v = EXPRESSIONS[i].subs(values)
        want.append(int(bool(v)) if v in (sympy.true, sympy.false) else int(v))
    columns = {s.name: torch.tensor([r[s] for r in rows], dtype=torch.int64) for s in SYMBOLS}
    return columns, torch.tensor(want, dtype=torch.int64)


@pytest.fixture(scope="module")
def cpp_library(tmp_path_factory):
    pytest.importorskip("torchkiln_codegen_cpp")
    from torchkiln_codegen_cpp.cache import build_library
    from torchkiln_codegen_cpp.options import CppOptions
    from torchkiln_codegen_cpp.printer import print_index

    names = ", ".join(f"{s.name} = v{s.name}[k]" for s in SYMBOLS)
    params = ", ".join(f"const int64_t* v{s.name}" for s in SYMBOLS)
    lines = ["#include <algorithm>", "#include <cstdint>"]
    for i, expr in enumerate(EXPRESSIONS):
        lines += [
            f'extern "C" void expr_{i}({params}, int64_t* out, int64_t count) {{',
            "  for (int64_t k = 0; k < count; k++) {",
            f"    const int64_t {names};",
            f"    out[k] = static_cast<int64_t>({print_index(expr)});",
            "  }",
            "}",
        ]
    options = CppOptions(cache_dir=str(tmp_path_factory.mktemp("index-printer-cpp")))
    _, library = build_library("\n".join(lines) + "\n", options)
    return ctypes.CDLL(str(library))


@pytest.fixture(scope="module")
def triton_module(tmp_path_factory):
    pytest.importorskip("torchkiln_codegen_triton")
    if os.environ.get("TRITON_INTERPRET") in ("", "0"):
        pytest.skip("needs Triton's CPU interpreter")
    from torchkiln_codegen_triton.printer import texpr

    params = ", ".join(f"v{s.name}" for s in SYMBOLS)
    lines = ["import triton", "import triton.language as tl"]
    for i, expr in enumerate(EXPRESSIONS):
        lines += [
            "",
            "@triton.jit",
            f"def expr_{i}({params}, out, COUNT: tl.constexpr):",
            "    k = tl.arange(0, COUNT)",
        ]
        lines += [f"    {s.name} = tl.load(v{s.name} + k)" for s in SYMBOLS]
        lines.append(f"    tl.store(out + k, ({texpr(expr)}).to(tl.int64))")
    cache = CodeCache(tmp_path_factory.mktemp("index-printer-triton"))
    module, _ = source_module(
        cache, "\n".join(lines) + "\n", "kernel.py", "tk_index_printer_", register=True
    )
    return module


@pytest.mark.parametrize("i", range(len(EXPRESSIONS)), ids=IDS)
def test_cpp_printer_computes_sympys_value(cpp_library, i):
    columns, want = samples(i)
    out = torch.empty(SAMPLES, dtype=torch.int64)
    fn = getattr(cpp_library, f"expr_{i}")
    fn(
        *(ctypes.c_void_p(columns[s.name].data_ptr()) for s in SYMBOLS),
        ctypes.c_void_p(out.data_ptr()),
        ctypes.c_int64(SAMPLES),
    )
    assert out.tolist() == want.tolist()


@pytest.mark.parametrize("i", range(len(EXPRESSIONS)), ids=IDS)
def test_triton_printer_computes_sympys_value(triton_module, i):
    columns, want = samples(i)
    out = torch.empty(SAMPLES, dtype=torch.int64)
    getattr(triton_module, f"expr_{i}")[(1,)](
        *(columns[s.name] for s in SYMBOLS), out, COUNT=SAMPLES
    )
    assert out.tolist() == want.tolist()


def test_both_printers_refuse_the_same_expressions():
    pytest.importorskip("torchkiln_codegen_cpp")
    pytest.importorskip("torchkiln_codegen_triton")
    from torchkiln_codegen_cpp import CodegenError as CppError
    from torchkiln_codegen_cpp.printer import print_index
    from torchkiln_codegen_triton import CodegenError as TritonError
    from torchkiln_codegen_triton.printer import texpr

    for bad in (x0 / 2, x0**-1, sympy.sin(x0)):
        with pytest.raises(CppError, match="C\\+\\+"):
            print_index(bad)
        with pytest.raises(TritonError, match="Triton"):
            texpr(bad)
