"""SIMD variants of float32 libm functions from glibc's libmvec, without ``-ffast-math``.

glibc's ``<math.h>`` declares the vector variants (``_ZGVdN8v_expf``, ...) only under
``__FAST_MATH__``, which we may not use (it breaks NaN/inf semantics everywhere). Declaring the
scalar functions ourselves with ``__attribute__((simd("notinbranch")))`` tells GCC the vector
variants exist, so ``#pragma omp simd`` loops call them; nothing else about the compile changes.
libmvec's float variants are accurate to a few ULP and handle NaN, infinities, overflow and
underflow by falling back to the scalar function on those lanes (checked against eager by
tests/test_cpp_vector_math.py).

Only on x86-64 Linux with glibc >= 2.35 (the version that added tanhf, erff, log1pf, ...; 2.22
had only exp/log/sin/cos/pow) and a linkable libmvec; anywhere else kernels call scalar libm.
"""

from __future__ import annotations

import ctypes.util
import functools
import platform
import sys

# Unary float functions whose libmvec variant exists since glibc 2.35 and matched eager within
# tolerance (tests/test_cpp_vector_math.py covers each of them).
VECTOR_FLOAT_FUNCTIONS: tuple[str, ...] = (
    "expf",
    "exp2f",
    "expm1f",
    "logf",
    "log2f",
    "log10f",
    "log1pf",
    "sinf",
    "cosf",
    "tanf",
    "asinf",
    "acosf",
    "atanf",
    "sinhf",
    "coshf",
    "tanhf",
    "asinhf",
    "acoshf",
    "atanhf",
    "erff",
    "erfcf",
)
# powf is left out: with its simd declaration, GCC 12 (-O3 -march=native) dies with an internal
# compiler error on std::pow(x, 0.5f) in a simd loop (it rewrites pow(x, 0.5) to sqrt and then
# fails to vectorize the call): float32 pow(x, 0.5) fell back to eager.
VECTOR_FLOAT_BINARY: tuple[str, ...] = ("atan2f",)

# The pair GCC merges into sincosf (see ``declarations``).
_SINCOS: tuple[str, ...] = ("sinf", "cosf")

# Seen in a library's source: link it against libmvec (see ``link_flags``).
MARKER = "// torchkiln: libmvec declarations"


@functools.lru_cache(maxsize=1)
def libmvec_available() -> bool:
    """Whether this machine's glibc ships libmvec with the float variants listed above."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return False
    lib, version = platform.libc_ver()
    if lib != "glibc":
        return False
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (2, 35) and ctypes.util.find_library("mvec") is not None


def declarations() -> str:
    """C++ declarations that let GCC vectorize the listed float functions (empty when unavailable)."""
    if not libmvec_available():
        return ""
    attr = '__attribute__((simd("notinbranch")))'
    lines = [MARKER, 'extern "C" {']
    lines += [f"{attr} float {fn}(float) noexcept;" for fn in VECTOR_FLOAT_FUNCTIONS]
    lines += [f"{attr} float {fn}(float, float) noexcept;" for fn in VECTOR_FLOAT_BINARY]
    # sinf and cosf again under names GCC does not know as builtins (the same symbols, through
    # asm labels): GCC turns sinf(x) and cosf(x) of one x into a scalar sincosf, which has no
    # vector variant, and the whole loop stays scalar (rotary embeddings); calls to these names
    # stay two calls, each vectorized (llama's rotary kernel: 32 -> 7 us)
    lines += [f'{attr} float tk_mvec_{fn}(float) noexcept __asm__("{fn}");' for fn in _SINCOS]
    lines.append("}")
    lines += [f"inline float tk_{fn[:-1]}(float x) {{ return tk_mvec_{fn}(x); }}" for fn in _SINCOS]
    return "\n".join(lines) + "\n"


def link_flags(source: str) -> tuple[str, ...]:
    """Linker flags a library's source needs (placed after the source file on the command line)."""
    return ("-lmvec",) if MARKER in source else ()
