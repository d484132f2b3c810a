"""Mixed-order reductions: a row reduction and a column reduction of the same rows in one pass.

A layer norm's backward reduces ``g * w`` and ``g * w * xhat`` along each row (for the input's
gradient) and ``g * xhat`` and ``g`` down each column (the weight's and bias's gradients). As two
kernels, ``g`` and ``x`` are read twice: five passes over the rows where three are needed (the
row kernel reads ``g``, ``x`` and writes the gradient), which caps the pair at 60% of the
memory bandwidth however fast each kernel is.

The column reduction of ``R`` rows is a split reduction (``split_reductions.py``): partials over
chunks of rows, then a short reduction of the partials. This pass splits it again so that it
can share the row kernel: into ``P`` chunks of ``J = R / P`` consecutive rows, ``P`` about the
programs that fill the device (``GraphLowering.parallel_programs``). The partial of chunk ``p``
reads row ``p * J + j`` at column ``c``; the scheduler (``group_plan.py``) may then lay it out
inside the row reduction's kernel, a *mixed-order* kernel (``KernelSpec.row_programs``): program
``p`` loops over its ``J`` rows, computes each row's reductions with the row held in registers,
and adds each row's values into per-column accumulators, stored once as partial row ``p``. The
second reduction then sums ``P`` partials per column.

The pass runs on the lowered graph before scheduling, where:

- the column reduction was split and sums (``Reduction.split_from``);
- a row reduction exists over the same rows (its x ranges' product is the column reduction's
  r ranges' product) whose r ranges are the column reduction's x ranges, short enough for the
  backend's mixed-order kernel (``BackendCapabilities.mixed_order_rnumel``);
- both read one buffer at the same element (``g`` and ``x`` above), or the column reduction sums
  a value the row kernel computes from the row reduction (``_sums_rows_output``: the input's
  gradient, whose column sums are the bias gradient of the linear or convolution before the
  layer norm; the row kernel adds each row of it as it stores it): else sharing a kernel saves
  nothing;
- the rows divide into at least ``_MIN_PROGRAMS_SHARE`` of the target programs, static sizes.

It only changes how the column reduction is split (the values are the same sums, added in
another order); whether the row kernel takes the partials is the scheduler's decision, as for
any fusion. A partial left alone is an ordinary reduction of ``J`` rows per output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy

from ._simplify import simplify_index
from .group_plan import flatten
from .handlers import NoOpHandler
from .indexing import index_symbol
from .ir import ComputedBuffer, FixedLayout, Reduction, contiguous_strides, product
from .lowering.split_reductions import unflatten
from .ops import set_ops_handler

#: the fewest programs, as a share of the target, a mixed-order kernel may run as: rows that
#: divide only into fewer chunks (a prime count) keep the column reduction's own split
_MIN_PROGRAMS_SHARE = 4

#: a mixed-order kernel over rows of ``width`` values takes up to ``NARROW_ROW_VALUES //
#: width`` times the target programs (``narrow_programs``)
NARROW_ROW_VALUES = 1024


class _Loads(NoOpHandler):
    def __init__(self) -> None:
        super().__init__()
        self.loads: list[tuple[str, sympy.Expr]] = []

    def load(self, name: str, index: Any) -> None:
        self.loads.append((name, sympy.sympify(index)))


def _loads(fn: Any, *args: Any) -> set[tuple[str, sympy.Expr]] | None:
    recorder = _Loads()
    try:
        with set_ops_handler(recorder):
            fn(*args)
    except Exception:  # noqa: BLE001 - an analysis only: lowering reports real errors
        return None
    return set(recorder.loads)


def _symbols(ranges: Sequence[sympy.Expr], prefix: str) -> list[sympy.Expr]:
    """An index symbol per dim, 0 for dims of size 1."""
    return [
        sympy.Integer(0) if sympy.sympify(s) == 1 else index_symbol(prefix, i)
        for i, s in enumerate(ranges)
    ]


def shares_rows(row: Reduction, column: Reduction) -> bool:
    """Whether ``row`` (a reduction along rows) and ``column`` (down the same rows' columns)
    read one buffer at the same element, varying along both rows and columns."""
    xs, rs = _symbols(row.ranges, "x"), _symbols(row.reduction_ranges, "r")
    ranges = {v: s for v, s in zip(xs + rs, (*row.ranges, *row.reduction_ranges)) if v != 0}
    rows = unflatten(flatten(xs, row.ranges), column.reduction_ranges)
    columns = iter(v for v in rs if v != 0)
    cs = [sympy.Integer(0) if sympy.sympify(s) == 1 else next(columns) for s in column.ranges]
    a = _loads(row.inner_fn, xs, rs)
    b = _loads(column.inner_fn, cs, rows)
    if not a or not b:
        return False
    x_syms, r_syms = {v for v in xs if v != 0}, {v for v in rs if v != 0}

    def simplified(loads):
        return {(n, simplify_index(i, ranges)) for n, i in loads}

    for _, index in simplified(a) & simplified(b):
        free = index.free_symbols
        if free & x_syms and free & r_syms:
            return True
    return False


#: how many pointwise buffers deep ``_sums_rows_output`` looks from a column sum for a row
#: reduction (the gradient, its cast to bfloat16, a view of that: each realized for a reader of
#: its own)
_COMPUTED_DEPTH = 3


def _sums_rows_output(
    column: Reduction, row_names: set[str], by_name: dict[str, ComputedBuffer]
) -> bool:
    """Whether ``column`` sums a pointwise buffer over all its rows and columns that is computed
    from one of the row reductions ``row_names``, directly or through at most
    ``_COMPUTED_DEPTH`` such buffers (a layer norm backward's input gradient, whose column sums
    are the bias gradient of the linear or convolution before it): the row kernel makes each
    row of it, and the column sums can take it from there instead of reading it again."""
    numel = _static(column.ranges + column.reduction_ranges)
    if not numel or not row_names:
        return False
    found = _loads(
        column.inner_fn, _symbols(column.ranges, "x"), _symbols(column.reduction_ranges, "r")
    )
    names, seen = {n for n, _ in found or ()}, set()
    for _ in range(_COMPUTED_DEPTH):
        nxt: set[str] = set()
        for name in names - seen:
            seen.add(name)
            buf = by_name.get(name)
            if buf is None or buf.is_reduction or _static(buf.ranges) != numel:
                continue
            loads = {n for n, _ in _loads(buf.data.inner_fn, _symbols(buf.ranges, "x")) or ()}
            if loads & row_names:
                return True
            nxt |= loads
        names = nxt
    return False


def _row_programs(rows: int, target: int) -> int:
    """The most chunks, at most ``target``, that ``rows`` divides into evenly, or 0 when that
    is fewer than ``target / _MIN_PROGRAMS_SHARE`` (or fewer than two rows a chunk)."""
    best = 0
    for p in range(min(target, rows // 2), 0, -1):
        if rows % p == 0:
            best = p
            break
    return best if best * _MIN_PROGRAMS_SHARE >= target else 0


def narrow_programs(width: int, target: int, scale: int) -> int:
    """The programs a mixed-order kernel over rows of ``width`` values aims for: ``target``
    times the least of ``scale`` (``LoopIROptions.mixed_order_narrow_programs``) and
    ``NARROW_ROW_VALUES // width``, at least once: rows of up to 256 values four times, of 384
    and 512 twice, longer rows once. A program of a narrow row's kernel runs few warps (a row
    of 192 bf16 values: RBLOCK 256, 2 warps), so the target's few programs a SM keep too few
    loads in flight. On an H100 (session 40, bf16, a layer norm backward alone, GB/s at 1, 2,
    4 and 8 times the programs): rows of 192 1083 / 1462 / 1554 / 1506, rows of 384 1220 /
    1488 / 1539 / 1095, rows of 96 (eight rows a block) 1750 at 1, 2 and 4 times, 1148 at 8;
    rows of 768 (1, 2, 4 times) 885 / 882 / 698 over 3136 rows, 1545 / 1562 / 1127 over 8192.
    This rule (rows of 384 twice) is the one ConvNeXt-tiny's training step was measured
    with: 1.0% faster than the target alone."""
    return target * max(1, min(scale, NARROW_ROW_VALUES // max(width, 1)))


def _dims(ranges: Sequence[sympy.Expr]) -> tuple[sympy.Expr, ...]:
    """``ranges`` without its dims of size 1 (a keepdim reduction's)."""
    return tuple(s for s in ranges if sympy.sympify(s) != 1)


def _static(ranges: Sequence[sympy.Expr]) -> int | None:
    n = sympy.sympify(product(ranges))
    return int(n) if n.is_Integer else None


def mix_orders(
    nodes: list[Any],
    max_rnumel: int,
    programs: int,
    computed: bool = True,
    narrow_scale: int = 1,
) -> list[Any]:
    """``nodes`` with each split column reduction that a row reduction over the same rows could
    share a kernel with split again into chunks of rows for it (module docstring); the others
    as they are. ``max_rnumel``: the backend's ``mixed_order_rnumel``; ``programs``: how many
    programs fill the device; ``computed``: also the column sums of a value computed from
    the row reductions (``_sums_rows_output``), not only of values the row kernel loads;
    ``narrow_scale``: up to how many times ``programs`` narrow rows take
    (``narrow_programs``)."""
    if max_rnumel <= 0 or programs <= 0:
        return nodes
    row_reductions: dict[tuple[int, tuple], list[ComputedBuffer]] = {}
    for n in nodes:
        if isinstance(n, ComputedBuffer) and n.is_reduction and n.data.split_from is None:
            rows, width = _static(n.data.ranges), _static(n.data.reduction_ranges)
            if rows and width and width <= max_rnumel and not n.data.row_chunks:
                key = (rows, _dims(n.data.reduction_ranges))
                row_reductions.setdefault(key, []).append(n)
    if not row_reductions:
        return nodes
    replaced: dict[str, ComputedBuffer] = {}
    by_name = {n.name: n for n in nodes if isinstance(n, ComputedBuffer)}
    for n in nodes:
        if not (isinstance(n, ComputedBuffer) and n.is_reduction):
            continue
        column = n.data.split_from
        partial = by_name.get(n.data.split_partial)
        if column is None or partial is None or column.reduction_type != "sum":
            continue
        rows = _static(column.reduction_ranges)
        candidates = row_reductions.get((rows, _dims(column.ranges)), [])
        shares = any(shares_rows(r.data, column) for r in candidates)
        if computed and not shares:
            shares = _sums_rows_output(column, {r.name for r in candidates}, by_name)
        if not rows or not shares:
            continue
        width = _static(column.ranges) or max_rnumel
        wanted = narrow_programs(width, programs, narrow_scale)
        chunks = _row_programs(rows, wanted) or _row_programs(rows, programs)
        if not chunks:
            continue
        new_partial, final = _resplit(n, partial, column, chunks, rows // chunks)
        replaced[partial.name] = new_partial
        replaced[n.name] = final
    return [replaced.get(getattr(n, "name", None), n) for n in nodes]


def _resplit(
    final: ComputedBuffer, partial: ComputedBuffer, column: Reduction, chunks: int, rows: int
) -> tuple[ComputedBuffer, ComputedBuffer]:
    """(partials over ``chunks`` chunks of ``rows`` rows, their sum): ``final``'s value, the same
    buffers' names."""
    rsizes = column.reduction_ranges
    length = sympy.Integer(rows)

    def partial_fn(index, rindex):
        return column.inner_fn(list(index[1:]), unflatten(index[0] * length + rindex[0], rsizes))

    acc = partial.data.dtype
    ranges = (sympy.Integer(chunks), *column.ranges)
    data = Reduction(
        partial_fn,
        ranges,
        (length,),
        "sum",
        acc,
        column.src_dtype,
        column.device,
        row_chunks=chunks,
    )
    layout = FixedLayout(column.device, acc, ranges, contiguous_strides(ranges))
    new_partial = ComputedBuffer(
        partial.name, layout, data=data, reason=partial.reason, origin=partial.origin
    )
    load = new_partial.make_loader()
    total = Reduction(
        lambda index, rindex: load([rindex[0], *index]),
        column.ranges,
        (sympy.Integer(chunks),),
        "sum",
        final.data.dtype,
        acc,
        column.device,
    )
    new_final = ComputedBuffer(
        final.name, final.layout, data=total, reason=final.reason, origin=final.origin
    )
    return new_partial, new_final
