"""Accumulating scatters without atomics: each thread owns a range of the innermost x-variable.

An embedding's gradient (``index_put(zeros, [ids], grads, accumulate=True)``) is a kernel over
(tokens, columns) storing ``out[i*C + c] += g[t*C + c]`` with ``i`` loaded from the ids. Two
threads may meet on a row, so every store is an ``omp atomic``; with few rows they meet all the
time. BERT's token-type embedding (2 rows) took 2.45 ms of a 15 ms training step this way
(small config at batch 32, 2 cores, ``benchmarks/cpu_kernel_times.py --model bert``).

When every such store's index is ``k*c + rest`` with ``c`` the innermost x-variable (size
``n``), one coefficient ``k`` for all of them, and each term of ``rest`` a multiple of ``k*n``
(the ids' rows, the other x-variables' strides, a constant too), an element's index modulo
``k*n`` is ``k*c``: two iterations with different ``c`` never write the same element (a
constant that is not such a multiple would shift one store onto another's ``c``). Then each
thread takes a contiguous range of ``c`` and runs every other iteration itself, in order:
plain ``+=`` stores, no two threads on one element, and the range's loop is contiguous and
vectorizable. The kernel must make no other store and not load what it scatters into (it would
see another thread's partial sums).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sympy
from torchkiln_loop_ir.backend import KernelSpec

from .printer import print_index

if TYPE_CHECKING:
    from .kernel import CppOpsHandler
    from .options import CppOptions

#: a range per thread narrower than this would not pay for every thread walking all the rows
MIN_COLUMNS = 32


def _coefficient(index: sympy.Expr, var: sympy.Symbol, size: int) -> int | None:
    """``k`` when ``index`` is ``k*var + rest`` with ``k > 0`` an integer and every term of
    ``rest``, constants included, a multiple of ``k*size``, ``var`` nowhere else; else None."""
    terms = sympy.Add.make_args(sympy.expand(index))
    linear = [t for t in terms if t.has(var)]
    if len(linear) != 1:
        return None
    k, rest = linear[0].as_coeff_Mul()
    if rest != var or not k.is_Integer or k <= 0:
        return None
    block = int(k) * size
    for term in terms:
        if term is linear[0]:
            continue
        coeff, _ = term.as_coeff_Mul()
        if not coeff.is_Integer or int(coeff) % block != 0:
            return None
    return int(k)


def owned_scatter(
    kernel: KernelSpec,
    h: CppOpsHandler,
    options: CppOptions,
    body: list[str],
    hoisted: list[str],
    parallel: str | None,
) -> list[str] | None:
    """The loop nest of a scatter kernel run without atomics (module docstring), or None when
    the kernel does not qualify."""
    state = h.state
    nx = len(kernel.xranges)
    if not options.owned_scatter or not state.atomic_stores or kernel.rranges or nx < 2:
        return None
    if state.plain_stores or any(name in state.loaded for name, _ in state.atomic_stores):
        return None
    size = sympy.sympify(kernel.xranges[-1])
    if not size.is_Integer or int(size) < MIN_COLUMNS:
        return None
    var = h.xvars[-1]
    coefficients = {_coefficient(index, var, int(size)) for _, index in state.atomic_stores}
    if len(coefficients) != 1 or None in coefficients:
        return None
    n = int(size)
    lines = [f"  #pragma omp parallel{parallel}" if parallel is not None else "  // serial", "  {"]
    lines += [
        "    #ifdef _OPENMP",
        "    const int64_t tk_threads = omp_get_num_threads(), tk_thread = omp_get_thread_num();",
        "    #else",
        "    const int64_t tk_threads = 1, tk_thread = 0;",
        "    #endif",
        f"    const int64_t tk_lo = ({n}LL * tk_thread) / tk_threads;",
        f"    const int64_t tk_hi = ({n}LL * (tk_thread + 1)) / tk_threads;",
    ]
    indent = "    "
    for i, (x, extent) in enumerate(zip(h.xvars[:-1], kernel.xranges[:-1])):
        lines.append(
            f"{indent}for (int64_t {x.name} = 0; {x.name} < {print_index(extent)}; {x.name}++) {{"
        )
        indent += "  "
        if i == nx - 2:
            lines.extend(indent + ln for ln in hoisted)
    if options.simd:
        lines.append(f"{indent}#pragma omp simd")
    lines.append(f"{indent}for (int64_t {var.name} = tk_lo; {var.name} < tk_hi; {var.name}++) {{")
    # the atomics' pragmas go: no other thread writes this range of the variable
    lines.extend(indent + "  " + ln for ln in body if ln.strip() != "#pragma omp atomic")
    lines.append(f"{indent}}}")
    for _ in range(nx - 1):
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    lines.append("  }")
    return lines
