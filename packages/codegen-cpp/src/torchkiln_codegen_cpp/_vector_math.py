"""SIMD variants of float32 libm functions from glibc's libmvec, without ``-ffast-math``, and the
same value for an element wherever it is computed.

glibc's ``<math.h>`` declares the vector variants (``_ZGVdN8v_expf``, ...) only under
``__FAST_MATH__``, which we may not use (it breaks NaN/inf semantics everywhere). libmvec's float
variants are accurate to a few ULP and handle NaN, infinities, overflow and underflow by falling
back to the scalar function on those lanes (checked against eager by
tests/test_cpp_vector_math.py).

One implementation per function. Letting GCC call libmvec directly (declaring ``expf`` with
``__attribute__((simd))``, as 0.5.5 did) gives an element's value by where the element falls:
a vectorized loop calls the variant of its vector width (SSE ``_ZGVbN4v``, AVX2 ``_ZGVdN8v``,
AVX-512 ``_ZGVeN16v``), its remainder and any loop left scalar call scalar libm, and these
differ in the last bits (cosf of -1.1259: 0x1.b8b64ap-2 scalar, 0x1.b8b64cp-2 vector). A
value computed twice then disagrees with itself: ``cos(x) == cos(x).amin()`` held for no
element when the minimum came from a vector lane and the comparison from the scalar remainder,
and amin's backward (a recomputed ``cos`` against the saved minimum) divided by a count of 0
(fuzz seed 31971: NaN gradients). So kernels call ``tk_mvec_<name>`` (``tk_<name>`` in the
templates), a function of our own declared with the simd attribute, and each kernel library
defines (hidden) its scalar symbol and every vector variant GCC may call through one libmvec
variant, the widest the compile targets (AVX-512's, else AVX2's): a narrower vector in its low
lanes, the rest 0, and a scalar broadcast (``_shims``). Every evaluation of a function then runs
the same code on the same bits, lane by lane. (The widest, so that a vectorized loop's call
stays one call; a scalar tail's call now computes a whole vector: ``benchmarks/cpu_vector_math.py``.)

Only on x86-64 Linux with glibc >= 2.35 (the version that added tanhf, erff, log1pf, ...; 2.22
had only exp/log/sin/cos/pow), a linkable libmvec and AVX2 in the compile's target; anywhere
else kernels call scalar libm (one implementation too).
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

# Seen in a library's source: link it against libmvec (see ``link_flags``).
MARKER = "// torchkiln: libmvec declarations"


def template_name(fn: str) -> str:
    """The prelude's name for a listed function: ``tk_exp`` for ``expf``."""
    return f"tk_{fn[:-1]}"


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


_EXP_OVERLOAD = """
// exp(x) is +0 below -103.98 in float (e^-104 is under half the smallest subnormal). libmvec's
// vector expf sends every lane of a vector holding such an x (or -inf: a masked softmax) through
// its scalar fallback, 4x slower on attention masks; those lanes are answered here instead.
inline float tk_exp(float x) {{
  bool zero = x < -104.0f;
  float e = {call}(tk_where(zero, 0.0f, x));
  return tk_where(zero, 0.0f, e);
}}
"""


#: GCC's vector types (``<immintrin.h>``'s ``__m128`` / ``__m256`` / ``__m512`` are these; g++ 12
#: here took 0.3 s longer on an empty source that includes the header), by lanes
_VECTOR_TYPES = "\n".join(
    f"typedef float tk_f{n} __attribute__((vector_size({4 * n})));" for n in (4, 8, 16)
)

#: the variant every evaluation goes through, by the widest vector the compile targets:
#: libmvec's mangled prefix, its lanes, and the variants GCC may call (our symbol's prefix and
#: lanes; "" and 1 the scalar symbol)
_CANONICAL = {
    "__AVX512F__": ("_ZGVeN16", 16, [("", 1), ("_ZGVbN4", 4), ("_ZGVcN8", 8), ("_ZGVdN8", 8), ("_ZGVeN16", 16)]),
    "__AVX2__": ("_ZGVdN8", 8, [("", 1), ("_ZGVbN4", 4), ("_ZGVcN8", 8), ("_ZGVdN8", 8)]),
}  # fmt: skip


def _shims(fn: str, arity: int, target: str) -> list[str]:
    """``tk_mvec_<fn>`` for a compile targeting ``target`` (a ``_CANONICAL`` macro): its simd
    declaration, then its scalar symbol and the variant of each x86 vector width GCC may call,
    all through libmvec's variant of the widest width, the narrower ones in its low lanes (the
    rest 0) and a scalar broadcast (hidden: each library its own)."""
    v = "v" * arity
    prefix, lanes, widths = _CANONICAL[target]
    wide = f"tk_f{lanes}"
    libmvec = f"{prefix}{v}_{fn}"
    lines = [
        f'extern "C" {wide} {libmvec}({", ".join([wide] * arity)}) noexcept;',
        f'extern "C" __attribute__((simd("notinbranch"))) float tk_mvec_{fn}'
        f"({', '.join(['float'] * arity)}) noexcept;",
    ]
    for ours, n in widths:
        ctype = "float" if n == 1 else f"tk_f{n}"
        symbol = f"{ours}{v}_tk_mvec_{fn}" if ours else f"tk_mvec_{fn}"
        name = f"tk_mvec_{ours[4] if ours else 's'}_{fn}"  # its ISA letter
        params = ", ".join(f"{ctype} a{i}" for i in range(arity))
        if n == lanes:
            into = [f"a{i}" for i in range(arity)]
        elif n == 1:
            into = [f"(a{i} - ({wide}){{}})" for i in range(arity)]  # x - 0 keeps -0
        else:
            into = [
                f"({wide}){{{', '.join(f'a{i}[{k}]' for k in range(n))}}}" for i in range(arity)
            ]
        call = f"{libmvec}({', '.join(into)})"
        if n == lanes:
            body = f"return {call};"
        elif n == 1:
            body = f"return {call}[0];"
        else:
            body = (
                f"{wide} r = {call}; return ({ctype}){{{', '.join(f'r[{k}]' for k in range(n))}}};"
            )
        lines += [
            f'extern "C" __attribute__((visibility("hidden"))) {ctype} {name}({params}) noexcept'
            f' __asm__("{symbol}");',
            f"{ctype} {name}({params}) noexcept {{ {body} }}",
        ]
    return lines


def declarations(source: str, vector_math: bool = True) -> str:
    """The float overloads of the prelude's math templates (``tk_exp(float)``, ...) for a
    library whose kernels are ``source``: with ``vector_math`` (where libmvec and AVX2 are
    there), through ``tk_mvec_<fn>`` and its shims, for the functions ``source`` calls
    (``template_name``); else ``tk_exp``'s underflow guard over scalar libm alone."""
    scalar = _EXP_OVERLOAD.format(call="std::exp")
    if not (vector_math and libmvec_available()):
        return scalar
    used = [
        (fn, arity)
        for arity, names in ((1, VECTOR_FLOAT_FUNCTIONS), (2, VECTOR_FLOAT_BINARY))
        for fn in names
        if f"{template_name(fn)}(" in source
    ]
    lines = [MARKER, "#if defined(__AVX2__)", _VECTOR_TYPES]
    for directive, target in (("#if defined(__AVX512F__)", "__AVX512F__"), ("#else", "__AVX2__")):
        lines.append(directive)
        for fn, arity in used:
            lines += _shims(fn, arity, target)
    lines.append("#endif")
    for fn, arity in used:
        if fn != "expf":
            params = ", ".join(f"float a{i}" for i in range(arity))
            names = ", ".join(f"a{i}" for i in range(arity))
            lines.append(
                f"inline float {template_name(fn)}({params}) {{ return tk_mvec_{fn}({names}); }}"
            )
    if ("expf", 1) in used:
        lines.append(_EXP_OVERLOAD.format(call="tk_mvec_expf"))
    else:
        lines.append(scalar)
    lines += ["#else", scalar, "#endif"]
    return "\n".join(lines) + "\n"


def link_flags(source: str) -> tuple[str, ...]:
    """Linker flags a library's source needs (placed after the source file on the command line)."""
    return ("-lmvec",) if MARKER in source else ()
