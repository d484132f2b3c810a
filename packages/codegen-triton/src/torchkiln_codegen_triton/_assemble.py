"""The whole kernel: ``generate`` runs the Triton ops handler (kernel.py) over a ``KernelSpec``'s
stages and lays out the ``@triton.jit`` function(s): the x (and r) index recovered from the flat
one, each stage's prefix, r-loop body and suffix, and for a split reduction the two functions of
``_split.py``. A looped softmax whose max and sum of exp may share one r-loop is tried first
(``_online.py``), the plain kernel when it cannot be. ``kernel_source``: the whole module text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sympy
import torch
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.indexing import ROW_PROGRAM, index_symbol
from torchkiln_loop_ir.ops import set_ops_handler

from . import _eviction, _online
from ._aligned import AlignedWalk, EdgeUnavailable, aligned_plan
from ._compat import interpreting
from ._layout import DEFAULT, BlockLayout, choose_layout
from ._online import OnlinePair, OnlineUnavailable, online_plan
from ._split import RCHUNK_PARAM, partial_name, split_functions
from ._template import Tile, template_shape
from ._template import head as template_head
from ._values import TritonValue
from .autotune import mixed_stages, rows_per_program
from .errors import CodegenError
from .kernel import STATUS_PARAM, TritonOpsHandler
from .options import TritonOptions
from .printer import texpr


class GeneratedKernel(NamedTuple):
    """``source``: the @triton.jit function(s); ``partials``: for a split reduction, the dtype
    of each partial buffer (parameters ``part_ptr0, ...`` after the tensors)."""

    source: str
    partials: tuple[torch.dtype, ...] = ()


def arg_names(spec: KernelSpec) -> dict[str, str]:
    names: dict[str, str] = {}
    for i, name in enumerate(spec.args):
        names[name] = f"in_ptr{i}" if name in spec.inputs else f"out_ptr{i}"
    return names


def _range_vars(
    ranges: Sequence[sympy.Expr], prefix: str, index: str, uniform_block: int = 0
) -> tuple[list[sympy.Expr], list[str], set[sympy.Symbol]]:
    """Symbols for each range (0 for ranges of size 1), the lines recovering them, and the
    symbols that are one value for the whole block: with ``uniform_block`` (the largest block
    the kernel may launch with, along the index), a range whose inner ranges' product is a
    multiple of it changes only between blocks, never inside one (each block starts at a
    multiple of its size), so it is recovered once from ``{prefix}offset``. A load that depends
    on x only through it is then one value per r (a layer norm backward's per-row mean in the
    weight gradient's column partials, which otherwise loads a whole tile of copies)."""
    vars_: list[sympy.Expr] = []
    lines: list[str] = []
    uniform: set[sympy.Symbol] = set()
    for i, size in enumerate(ranges):
        if sympy.sympify(size) == 1:
            vars_.append(sympy.Integer(0))
            continue
        sym = index_symbol(prefix, i)
        vars_.append(sym)
        inner = sympy.Integer(1)
        for s in ranges[i + 1 :]:
            inner = inner * s
        source = index
        if uniform_block > 1 and inner.is_Integer and int(inner) % uniform_block == 0:
            source = f"{prefix}offset"
            uniform.add(sym)
            lines.append(
                f"tl.static_assert({texpr(inner)} % {prefix.upper()}BLOCK == 0, "
                f"'{sym.name} is one value per block only when the block divides {texpr(inner)}')"
            )
        expr = source if inner == 1 else f"({source} // {texpr(inner)})"
        if i > 0:
            expr = f"({expr} % {texpr(size)})"
        lines.append(f"{sym.name} = {expr}")
    return vars_, lines, uniform


def generate(
    spec: KernelSpec,
    *,
    looped: bool,
    options: TritonOptions,
    interpret: bool | None = None,
    fn_name: str | None = None,
    layout: BlockLayout | None = None,
    split: bool = False,
    note: str = "",
    online: bool = True,
    xblock: int = 0,
    walked: bool = False,
) -> GeneratedKernel:
    """The ``@triton.jit`` function(s) for ``spec`` (no module header). ``layout``: how a
    reduction's block is laid out (None: ``choose_layout`` decides from the accesses);
    ``split``: a split reduction (``_split.py``, looped only), two functions; ``note``: why
    the kernel is persistent or looped (``Config.reason``), a comment at its top; ``online``:
    whether a looped softmax's max and sum of exp may share one r-loop (``_online.py``, also
    subject to ``options.online_softmax``); ``xblock``: the XBLOCK the kernel launches with
    (``Config.xblock``; autotuning may double it), 0 when not known; ``walked``: a persistent
    kernel's rows are walked whole from their aligned starts (``Config.walked``: its RBLOCK
    covers a row and its shift)."""
    interpret = interpreting() if interpret is None else interpret
    reduction = spec.is_reduction
    if layout is None:
        layout = choose_layout(spec) if reduction else DEFAULT
    split = split and reduction and looped
    plan = online_plan(
        spec, looped=looped and reduction, split=split, enabled=online and options.online_softmax
    )
    walk = aligned_plan(
        spec,
        looped=looped and reduction,
        split=split,
        layout=layout,
        enabled=options.aligned_rows,
        whole=walked and reduction and not looped,
    )
    args = (spec, looped, options, interpret, fn_name, layout, split, note)
    if plan is not None:
        try:
            return _generate(*args, plan, walk, xblock=xblock)
        except OnlineUnavailable:
            pass  # the plain three-pass kernel below
    if walk is not None and not looped:
        try:
            return _generate(*args, None, walk, xblock=xblock, edges=True)
        except EdgeUnavailable:
            pass  # the edge lanes stored from the row's block
    return _generate(*args, None, walk, xblock=xblock)


def _generate(
    spec: KernelSpec,
    looped: bool,
    options: TritonOptions,
    interpret: bool,
    fn_name: str | None,
    layout: BlockLayout,
    split: bool,
    note: str,
    plan: OnlinePair | None,
    walk: AlignedWalk | None = None,
    xblock: int = 0,
    edges: bool = False,
) -> GeneratedKernel:
    reduction = spec.is_reduction
    name = fn_name or spec.name
    names = arg_names(spec)
    handler = TritonOpsHandler(
        spec,
        names,
        reduction=reduction,
        looped=looped,
        options=options,
        interpret=interpret,
        layout=layout,
    )
    handler.split = split
    handler.online = plan
    handler.aligned = walk
    handler.edges = edges  # a whole walked row: its edge lanes from a block of their own
    handler.rereads = _eviction.reread_plan(
        spec,
        looped=looped and reduction,
        split=split,
        absorbed=None if plan is None else plan.stage + 1,
        enabled=options.eviction_hints,
    )
    handler.row_loop = bool(spec.row_programs)
    head = ["    xoffset = tl.program_id(0) * XBLOCK"]
    if spec.template is not None:  # the product's tile, then its epilogue on that 2-D block
        if reduction or spec.row_programs:
            raise CodegenError(f"kernel {spec.name}: a matmul template's epilogue is pointwise")
        tile = Tile.of(spec, interpret)
        head, product = template_head(spec, names, tile, interpret)
        handler.product_names = spec.template.names
        handler.product = TritonValue(product, torch.float32, frozenset({"x"}))
        handler.block_shape = template_shape(tile)
    elif reduction:
        head[0:0] = [f"    # block layout {layout.reason}"] + ([f"    # {note}"] if note else [])
        if plan is not None:
            head.insert(2, f"    # {plan.note}")
        if walk is not None:
            head.insert(2, f"    # {walk.note}")
        head += [
            f"    xindex = xoffset + tl.arange(0, XBLOCK){layout.x_arange}",
            "    xmask = xindex < xnumel",
            f"    rbase = tl.arange(0, RBLOCK){layout.r_arange}",
        ]
    else:
        head += ["    xindex = xoffset + tl.arange(0, XBLOCK)", "    xmask = xindex < xnumel"]
    # an outer reduction's x block (32-128 columns) inside a longer x range: that range is one
    # value per block (not for a split kernel, whose finish launches with other blocks)
    uniform_block = 2 * xblock if reduction and layout.transposed and not split else 0
    xvars, xlines, uniform = _range_vars(spec.xranges, "x", "xindex", uniform_block)
    rvars, rlines, _ = _range_vars(spec.rranges, "r", "rindex")
    for v in xvars:
        if isinstance(v, sympy.Symbol):
            handler.declare_symbol(v, frozenset() if v in uniform else frozenset({"x"}))
    for v in rvars:
        if isinstance(v, sympy.Symbol):
            handler.declare_symbol(v, frozenset({"r"}))
    if spec.row_programs:
        handler.declare_symbol(ROW_PROGRAM, frozenset())
    head += ["    " + ln for ln in xlines]
    if walk is not None:
        head += ["    " + ln for ln in walk.head()]
    with set_ops_handler(handler):
        for stage in spec.stages:
            is_loop = stage.kind == "loop" and reduction
            handler.begin_stage(looped and is_loop)
            handler.xvars = list(xvars)
            handler.rvars = list(rvars) if stage.kind == "loop" else []
            for node in stage.nodes:
                handler.across = node.across_rows
                handler.current_node = node
                node.body(list(xvars), list(rvars) if stage.kind == "loop" else [])
            handler.across = False
            handler.end_stage()
        if edges and walk is not None and handler.edge_nodes:
            handler.begin_edges(walk, rlines)
            for node in handler.edge_nodes:
                node.body(list(xvars), list(rvars))
            handler.end_stage()
    tensors = list(names.values()) + [partial_name(i) for i in range(len(handler.partials))]
    if handler.reports_status:  # the status word follows the tensors (TritonCompiledKernel)
        tensors.append(STATUS_PARAM)
    params = tensors + [str(s) for s in spec.size_args] + ["xnumel"]
    if split:
        return GeneratedKernel(
            split_functions(
                name, params, head, rlines, handler.stages, r_loop(options, RCHUNK_PARAM)
            ),
            tuple(handler.partials),
        )
    if reduction:
        params.append("rnumel")
    params.append("XBLOCK: tl.constexpr")
    if reduction:
        params.append("RBLOCK: tl.constexpr")
    rhead = ["rindex = rbase", "rmask = rindex < rnumel", *rlines]
    if spec.row_programs:
        if looped:
            raise CodegenError(f"kernel {spec.name}: a mixed-order kernel holds its rows whole")
        # one row an iteration pipelined by default; several only when asked (mixed_stages)
        stages = mixed_stages(spec, options) if xblock == 1 or options.mixed_stages else 1
        source = _row_loop(spec, head, xlines, rhead, handler, stages)
        return GeneratedKernel(f"def {name}({', '.join(params)}):\n{source}")
    if reduction and not looped and walk is not None:
        head += ["    " + ln for ln in [*walk.whole_row(layout.r_shape), *rlines]]
    elif reduction and not looped:
        head += ["    " + ln for ln in rhead]
    out = [f"def {name}({', '.join(params)}):", *head]
    for st in handler.stages:
        out += ["    " + ln for ln in st.init + st.prefix]
        if st.absorbed:
            _online.check_absorbed(st, handler.stages)
        elif st.looped and walk is not None:
            out += walk.loops(st.body, rlines, layout.r_shape)
        elif st.looped:
            out.append(f"    for roffset in {r_loop(options)}:")
            out += ["        " + ln for ln in ["rindex = roffset + rbase", *rhead[1:]]]
            out += ["        " + ln for ln in st.body]
        else:
            out += ["    " + ln for ln in st.body]
        out += ["    " + ln for ln in st.suffix]
    if len(out) == len(head) + 1:
        out.append("    pass")
    return GeneratedKernel("\n".join(out) + "\n")


def _row_loop(
    spec: KernelSpec,
    head: list[str],
    xlines: list[str],
    rhead: list[str],
    handler: TritonOpsHandler,
    stages: int = 1,
) -> str:
    """A mixed-order kernel's body (``KernelSpec.row_programs``): program ``p0`` takes rows
    ``[p0 * J, (p0 + 1) * J)``, XBLOCK of them an iteration, each row whole (a persistent
    reduction); what depends on no row comes before the loop, the partials across its rows
    (``TritonOpsHandler.after_rows``) after it. The launch's grid is ``row_programs``
    (``Config.rows``)."""
    rows = rows_per_program(spec)
    bounds = f"p0 * {rows}, (p0 + 1) * {rows}, XBLOCK"
    row_range = f"tl.range({bounds}, num_stages={stages})" if stages > 1 else f"range({bounds})"
    comments = [ln for ln in head if ln.lstrip().startswith("#")]
    out = [
        *comments,
        f"    # mixed order: {spec.row_programs} programs of {rows} rows, each row whole, "
        "the columns summed across a program's rows",
        "    p0 = tl.program_id(0)",
        f"    rbase = tl.arange(0, RBLOCK){DEFAULT.r_arange}",
        *("    " + ln for ln in rhead),
        *("    " + ln for ln in handler.before_rows),
        f"    for xoffset in {row_range}:",
        f"        xindex = xoffset + tl.arange(0, XBLOCK){DEFAULT.x_arange}",
        "        xmask = xindex < xnumel",
        *("        " + ln for ln in xlines),
    ]
    for st in handler.stages:
        out += ["        " + ln for ln in st.init + st.prefix + st.body + st.suffix]
    out += ["    " + ln for ln in handler.after_rows]
    return "\n".join(out) + "\n"


def r_loop(options: TritonOptions, end: str = "rnumel") -> str:
    """The iterator of an r-loop from 0 to ``end``: ``tl.range`` with ``num_stages`` when
    ``options.loop_stages`` asks for software pipelining (Triton then copies each iteration's
    loads into shared memory ``loop_stages - 1`` iterations ahead, cp.async, so that many blocks
    are in flight while a program computes on the current one, at no register cost), else a
    plain range."""
    if options.loop_stages > 1:
        return f"tl.range(0, {end}, RBLOCK, num_stages={options.loop_stages})"
    return f"range(0, {end}, RBLOCK)"


def kernel_source(kernel: KernelSpec, options: TritonOptions | None = None) -> str:
    """The complete Triton module text for ``kernel`` with its heuristic block sizes (its
    function named from the text: ``_naming.py``)."""
    from .backend import render_kernel

    return render_kernel(kernel, options or TritonOptions())[1]
