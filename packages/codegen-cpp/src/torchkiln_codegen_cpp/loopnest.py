"""The loop nest around a kernel's generated statements: OpenMP parallel x-loops (above a size
threshold), ``omp simd`` where it is legal, one r-loop per "loop" stage."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sympy
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.indexing import FloorDiv, ModularIndexing

from ._lanes import lane_blocks
from ._owned import owned_scatter
from ._status import STATUS_PARAM
from .options import CppOptions
from .printer import print_index, storage_type

if TYPE_CHECKING:
    from ._values import Scope
    from .kernel import CppOpsHandler


def render_loop_nest(kernel: KernelSpec, h: CppOpsHandler, symbol: str, options: CppOptions) -> str:
    """The ``extern "C"`` function: parameters (pointers, then int64 sizes, then the status word
    when the kernel reports errors) and the loop nest."""
    params = [f"{storage_type(kernel.buffers[n].dtype)}* {h.state.params[n]}" for n in kernel.args]
    params += [f"int64_t {s.name}" for s in kernel.size_args]
    if h.state.reports_status:
        params.append(f"int64_t* {STATUS_PARAM}")
    out = [f'extern "C" void {symbol}({", ".join(params)}) {{']
    for stage in kernel.stages:
        for node in stage.nodes:
            if node.origin:
                out.append(f"  // {node.buffer}: {node.origin}")
    body = _render_scope(h.x_scope, kernel, h, options, _vectorize_across_x(kernel, h))
    nx = len(kernel.xranges)
    xsizes = [print_index(s) for s in kernel.xranges]
    numel = sympy.Mul(*kernel.xranges, *kernel.rranges)
    parallel = _parallel_clause(numel, options.parallel_threshold)
    pointwise_only = not kernel.rranges and not h.state.has_atomic
    indent = "  "
    lines: list[str] = []
    outer = options.simd and _vectorize_across_x(kernel, h)
    inner_simd = (pointwise_only or outer) and options.simd
    # values invariant along the innermost x-loop sit just outside it (kernel.py's x_outer), so
    # only the loops around them are collapsed
    hoisted = h.x_outer.lines if h.x_outer is not None else []
    owned = owned_scatter(kernel, h, options, body, hoisted, parallel)
    if owned is not None:
        # an accumulating scatter whose threads each own a range of the innermost variable
        out.extend(owned)
        out.append("}")
        return "\n".join(out) + "\n"
    ncollapse = nx - 1 if inner_simd or hoisted else nx
    # cat's masks on the innermost index: one loop per piece between their constants (_splits.py);
    # not for a lone parallel loop (its pragma covers exactly one loop)
    pieces = periods = None
    if nx and pointwise_only and inner_simd and not (nx == 1 and parallel is not None):
        pieces = h.splits.pieces(kernel.xranges[-1])
        if pieces is None:
            periods = h.splits.period_pieces(kernel.xranges[-1])
    blocked = None
    if outer and options.x_lanes > 1:
        blocked = lane_blocks(
            h.x_scope.lines,
            h.xvars[-1].name,
            xsizes[-1],
            options.x_lanes,
            lambda item: _rloop_parts(item, kernel, h),
        )
    for i, (var, size) in enumerate(zip(h.xvars, xsizes)):
        if i == nx - 1 and pieces:
            lines.extend(_split_loops(var.name, pieces, body, indent))
            break
        if i == nx - 1 and periods is not None:
            lines.extend(_period_loops(var.name, xsizes[-1], *periods, body, indent))
            break
        if i == nx - 1 and blocked is not None:
            # the innermost x-loop as blocks of lanes (_lanes.py): the block loop takes the
            # parallel pragma of a lone x-loop; no simd on it, its lane loops carry their own
            if i == 0 and parallel is not None:
                lines.append(f"{indent}#pragma omp parallel for{parallel}")
            lines.extend(indent + ln for ln in blocked)
            break
        if i == 0 and parallel is not None:
            collapse = f" collapse({ncollapse})" if ncollapse > 1 else ""
            if nx == 1 and inner_simd:
                lines.append(
                    f"{indent}#pragma omp parallel for simd{parallel.replace('if(', 'if(parallel: ')}"
                )
            else:
                lines.append(f"{indent}#pragma omp parallel for{collapse}{parallel}")
        elif i == nx - 1 and inner_simd:
            # Also a serial 1-D loop: without the pragma GCC will not call the SIMD variants of
            # libm functions (they may set errno), so exp/log/tanh chains would stay scalar.
            lines.append(f"{indent}#pragma omp simd")
        lines.append(f"{indent}for (int64_t {var.name} = 0; {var.name} < {size}; {var.name}++) {{")
        indent += "  "
        if i == nx - 2:
            lines.extend(indent + ln for ln in hoisted)
    else:
        lines.extend(indent + ln for ln in body)
    for _ in range(nx if not (pieces or periods or blocked is not None) else nx - 1):
        indent = indent[:-2]
        lines.append(f"{indent}}}")
    out.extend(lines)
    out.append("}")
    return "\n".join(out) + "\n"


def _split_loops(
    var: str, pieces: list[tuple[int, int]], body: list[str], indent: str
) -> list[str]:
    """The innermost loop as one ``omp simd`` loop per ``[start, end)`` piece, same body each."""
    lines = []
    for start, end in pieces:
        lines.append(f"{indent}#pragma omp simd")
        lines.append(f"{indent}for (int64_t {var} = {start}LL; {var} < {end}LL; {var}++) {{")
        lines.extend(indent + "  " + ln for ln in body)
        lines.append(f"{indent}}}")
    return lines


def _period_loops(
    var: str, size: str, period: int, pieces: list[tuple[int, int]], body: list[str], indent: str
) -> list[str]:
    """The innermost loop as periods of ``period``, each split into the ``[start, end)`` pieces
    of ``var % period`` (``_split_loops`` over the piece's own counter ``var_r``), with
    ``var % period`` in the body spelled as that counter: g++ then knows its range and folds
    the masks that compare it."""
    rem = f"({var} % {period}LL)"
    inner = [
        f"const int64_t {var} = {var}_p + {var}_r;",
        *(ln.replace(rem, f"{var}_r") for ln in body),
    ]
    return [
        f"{indent}for (int64_t {var}_p = 0; {var}_p < {size}; {var}_p += {period}LL) {{",
        *_split_loops(f"{var}_r", pieces, inner, indent + "  "),
        f"{indent}}}",
    ]


def _parallel_clause(numel: sympy.Expr, threshold: int) -> str | None:
    """None: run serially; "": always parallel; " if(..)": decided at run time."""
    if isinstance(numel, sympy.Integer) or numel.is_number:
        return "" if int(numel) >= threshold else None
    return f" if({print_index(numel)} >= {threshold})"


def _vectorize_across_x(kernel: KernelSpec, h: CppOpsHandler) -> bool:
    """Vectorize the innermost x-loop (each SIMD lane runs a whole r-loop) instead of the r-loops:
    right when the r-loops walk memory with a non-unit stride but neighbouring x are adjacent in
    memory (``sum(0)`` of a contiguous matrix). x iterations are independent by the kernel
    contract, so the ``omp simd`` is legal; atomics and x-less kernels keep the r-loop simd."""
    if not kernel.rranges or not kernel.xranges or h.state.has_atomic or not h.r_indices:
        return False
    xlast, rlast = h.xvars[-1], h.rvars[-1]
    unit_x = False
    for index in h.r_indices:
        index = sympy.sympify(index)
        if index.has(FloorDiv, ModularIndexing):
            return False
        if sympy.diff(index, rlast) == 1:
            return False  # a contiguous r-access: the r-loop's own simd is the better one
        unit_x = unit_x or sympy.diff(index, xlast) == 1
    return unit_x


def _rloop_parts(
    item: Any, kernel: KernelSpec, h: CppOpsHandler
) -> tuple[list[str], list[str], list[str], list[str]]:
    """An r-loop of the x body as (the lines before it, its loop headers, its body, its
    closing braces), for ``_lanes.lane_blocks``: no simd pragma (the lane loop inside is the
    vectorized one)."""
    header = [
        f"{'  ' * depth}for (int64_t {var.name} = 0; {var.name} < {print_index(size)}; "
        f"{var.name}++) {{"
        for depth, (var, size) in enumerate(zip(h.rvars, kernel.rranges))
    ]
    closing = [f"{'  ' * depth}}}" for depth in reversed(range(len(header)))]
    return [*item.pre, *item.invariant.lines], header, list(item.body.lines), closing


def _render_scope(
    scope: Scope, kernel: KernelSpec, h: CppOpsHandler, options: CppOptions, outer: bool = False
) -> list[str]:
    out: list[str] = []
    for item in scope.lines:
        if isinstance(item, str):
            out.append(item)
            continue
        out.extend(item.pre)
        out.extend(item.invariant.lines)
        indent = ""
        clauses = "".join(f" reduction({op}:{acc})" for op, acc in item.simd_reductions or ())
        # A full reduction (no x-loop to spread over threads) splits its r-loop across threads
        # instead, when every accumulator is one OpenMP can combine.
        parallel = None
        if not kernel.xranges and item.simd_reductions is not None:
            parallel = _parallel_clause(sympy.Mul(*kernel.rranges), options.parallel_threshold)
        n = len(kernel.rranges)
        for depth, (var, size) in enumerate(zip(h.rvars, kernel.rranges)):
            if depth == 0 and parallel is not None:
                if n == 1 and options.simd:
                    if_clause = parallel.replace("if(", "if(parallel: ")
                    out.append(f"{indent}#pragma omp parallel for simd{clauses}{if_clause}")
                else:
                    collapse = f" collapse({n})" if n > 1 else ""
                    out.append(f"{indent}#pragma omp parallel for{collapse}{clauses}{parallel}")
            elif (
                depth == n - 1
                and parallel is None
                and options.simd
                and item.simd_reductions is not None
                and not outer  # no nested simd: the x-loop around is the vectorized one
            ):
                out.append(f"{indent}#pragma omp simd{clauses}")
            out.append(
                f"{indent}for (int64_t {var.name} = 0; {var.name} < {print_index(size)}; {var.name}++) {{"
            )
            indent += "  "
        out.extend(indent + ln for ln in item.body.lines)
        for _ in kernel.rranges:
            indent = indent[:-2]
            out.append(f"{indent}}}")
    return out
