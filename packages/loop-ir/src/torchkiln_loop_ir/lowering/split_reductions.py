"""Split reductions: a long reduction with too few outputs to keep the device busy runs as two.

The first reduction computes ``split`` partial results per output, each over one chunk of the
flattened reduction range; the second reduces the ``split`` partials of each output (the same
reduction type for sum, prod, max, min, any, xor_sum, which are associative; for a Welford
reduction, partial (mean, m2, weight) triples combined by ``welford_combine``, Chan et al.'s
parallel formula). Two rules pick ``split`` (``split_factor``; static sizes only, a symbolic size
keeps one pass), and the larger wins:

- *few outputs*, on every backend: fewer than ``_SPLIT_MAX_OUTPUTS`` outputs of at least
  ``_SPLIT_MIN_RNUMEL`` values each (``x.sum()`` of 2**20): up to 128 partials in all.
- *fill the device*, where the backend runs many programs at once
  (``BackendCapabilities.parallel_programs``, ``GraphLowering.parallel_programs``: 4 per SM on a
  GPU, 0 on a CPU, where the split only adds a pass): a reduction whose outputs give fewer than
  half that many programs (batch-norm statistics: 64-256 channels, each over N*H*W = 10**5-10**6
  values) is split until ``outputs / per-program x block * split`` reaches half the target
  (the programs then number 2-4 per SM: enough to fill the GPU, and the second kernel, which
  reads the partials, stays short), each program still reducing at least
  ``_WIDE_MIN_PROGRAM_ELEMENTS`` values, ``split`` a power of two dividing the reduction's
  length. A *column* reduction (memory contiguous along the
  outputs and strided along r: channels-last statistics over N, H, W) is reduced by a GPU code
  generator in blocks of about ``_COLUMN_XBLOCK`` contiguous outputs per program (codegen-triton's
  transposed layout), so it counts as that many times fewer programs and is split further.

The partials are laid out ``[split, *outputs]``: the output dims stay innermost, so a column
reduction's partial kernel keeps its block contiguous along the outputs (reads of the input and
writes of the partials coalesced) and the second kernel reads the partials along the same
contiguous dim.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy

from ..handlers import NoOpHandler
from ..indexing import ModularIndexing, contiguous_along, index_symbol, innermost_symbol
from ..ir import ComputedBuffer, Reduction, compute_dtype, product
from ..ops import set_ops_handler

_SPLIT_TYPES = frozenset({"sum", "prod", "max", "min", "any", "xor_sum"})
_SPLIT_MIN_RNUMEL = 65536
_SPLIT_MAX_OUTPUTS = 64
#: values each program of a device-filling split still reduces (its partials are then a small
#: fraction of the input's traffic, and the split pays for its second launch)
_WIDE_MIN_PROGRAM_ELEMENTS = 4096
#: at most this many partials per output
_WIDE_MAX_SPLIT = 1024
#: outputs one program of a column reduction covers (codegen-triton's transposed XBLOCK)
_COLUMN_XBLOCK = 64


def split_factor(red: Reduction, programs: int = 0) -> int:
    """How many partials per output, or 0 to keep one pass; ``programs``: how many programs fill
    the device (0: no device-filling split), see the module docstring."""
    if red.reduction_type not in _SPLIT_TYPES and red.reduction_type != "welford_reduce":
        return 0
    xnumel, rnumel = product(red.ranges), product(red.reduction_ranges)
    if not (xnumel.is_Integer and rnumel.is_Integer):
        return 0
    xnumel, rnumel = int(xnumel), int(rnumel)
    return max(_few_outputs(xnumel, rnumel), _fill_device(red, xnumel, rnumel, programs))


def _few_outputs(xnumel: int, rnumel: int) -> int:
    if rnumel < _SPLIT_MIN_RNUMEL or xnumel >= _SPLIT_MAX_OUTPUTS:
        return 0
    split = 1
    while split * 2 * xnumel <= 128 and rnumel % (split * 2) == 0 and rnumel // (split * 2) >= 1024:
        split *= 2
    return split if split > 1 else 0


def _fill_device(red: Reduction, xnumel: int, rnumel: int, programs: int) -> int:
    if programs <= 0 or xnumel == 0 or xnumel * 2 > programs * _COLUMN_XBLOCK:
        return 0  # no device to fill, or enough outputs even in column blocks
    xblock = _COLUMN_XBLOCK if is_column_reduction(red) else 1
    xprograms = -(-xnumel // xblock)
    if xprograms * 2 > programs:
        return 0
    per_row = min(xblock, xnumel)  # outputs each program reduces side by side
    split = 1
    while (
        xprograms * split * 2 < programs
        and split * 2 <= _WIDE_MAX_SPLIT
        and rnumel % (split * 2) == 0
        and rnumel // (split * 2) * per_row >= _WIDE_MIN_PROGRAM_ELEMENTS
    ):
        split *= 2
    return split if split > 1 else 0


class _LoadRecorder(NoOpHandler):
    def __init__(self) -> None:
        super().__init__()
        self.indices: list[sympy.Expr] = []

    def load(self, name: str, index: Any) -> None:
        self.indices.append(sympy.sympify(index))


def is_column_reduction(red: Reduction) -> bool:
    """Whether more of ``red``'s loads that vary along both x and r are contiguous along its
    innermost output dim than along its innermost reduction dim (channels-last statistics)."""
    xvar, rvar = innermost_symbol(red.ranges, "x"), innermost_symbol(red.reduction_ranges, "r")
    if xvar is None or rvar is None:
        return False
    recorder = _LoadRecorder()
    xs = [index_symbol("x", i) for i in range(len(red.ranges))]
    rs = [index_symbol("r", i) for i in range(len(red.reduction_ranges))]
    try:
        with set_ops_handler(recorder):
            red.inner_fn(xs, rs)
    except Exception:  # noqa: BLE001 - an analysis only: lowering reports real errors
        return False
    along = [contiguous_along(index, xvar, rvar) for index in dict.fromkeys(recorder.indices)]
    return along.count("x") > along.count("r")


def unflatten(flat: sympy.Expr, sizes) -> list[sympy.Expr]:
    """The index into dims of ``sizes`` (row-major) of element number ``flat``."""
    out, stride = [], sympy.Integer(1)
    for s in reversed(sizes):
        out.append(ModularIndexing(flat, stride, s) if s != 1 else sympy.Integer(0))
        stride = stride * s
    return list(reversed(out))


def _chunked(red: Reduction, split: int):
    """(inner_fn over (split, ranges...) x chunk ranges, chunk ranges): ``red``'s values, chunk
    by chunk of its flattened reduction range; the chunk index is the partials' first
    (outermost) dim. Where a chunk is a whole number of the trailing reduction dims (N*H*W in
    chunks of whole images), those dims stay dims of the chunk and only the leading ones are
    unflattened: the indices stay as simple as the unsplit reduction's."""
    rsizes = list(red.reduction_ranges)
    chunk = int(product(rsizes)) // split
    keep = len(rsizes)  # rsizes[keep:] stay whole in every chunk
    while keep > 0 and chunk % int(product(rsizes[keep - 1 :])) == 0:
        keep -= 1
    inner = rsizes[keep:]
    outer_chunk = sympy.Integer(chunk // int(product(inner)))
    lead = rsizes[:keep]

    def partial_fn(index, rindex):
        flat = index[0] * outer_chunk + rindex[0]
        return red.inner_fn(list(index[1:]), [*unflatten(flat, lead), *rindex[1:]])

    return partial_fn, (outer_chunk, *inner)


def split_reduction(ctx, red: Reduction, split: int) -> ComputedBuffer:
    """``red`` as partials over ``split`` chunks of its flattened reduction range, then the
    reduction of the partials (same reduction type: all of _SPLIT_TYPES are associative)."""
    partial_fn, chunk = _chunked(red, split)
    acc = compute_dtype(red.dtype)
    partial = ctx.reduction(
        Reduction(
            partial_fn,
            (sympy.Integer(split), *red.ranges),
            chunk,
            red.reduction_type,
            acc,
            red.src_dtype,
            red.device,
        )
    )
    load = partial.make_loader()
    return ctx.reduction(
        Reduction(
            lambda index, rindex: load([rindex[0], *index]),
            red.ranges,
            (sympy.Integer(split),),
            red.reduction_type,
            red.dtype,
            acc,
            red.device,
            split_from=red,
            split_partial=partial.name,
        )
    )


def split_welford(ctx, red: Reduction, split: int) -> tuple[ComputedBuffer, ComputedBuffer]:
    """Welford over ``split`` chunks (partial mean, m2, weight per chunk), then
    ``welford_combine`` of the partials (Chan et al.'s parallel formula)."""
    partial_fn, chunk = _chunked(red, split)
    pranges = (sympy.Integer(split), *red.ranges)
    parts = [
        ctx.reduction(
            dataclasses.replace(
                red, inner_fn=partial_fn, ranges=pranges, reduction_ranges=chunk, output_index=i
            )
        )
        for i in (0, 1, 2)
    ]
    loads = [p.make_loader() for p in parts]

    def combine_fn(index, rindex):
        return tuple(load([rindex[0], *index]) for load in loads)

    final = Reduction(
        combine_fn,
        red.ranges,
        (sympy.Integer(split),),
        "welford_combine",
        red.dtype,
        red.dtype,
        red.device,
    )
    mean, m2 = (ctx.reduction(dataclasses.replace(final, output_index=i)) for i in (0, 1))
    return mean, m2


def target_programs(ctx: Any, device: Any) -> int:
    """How many programs fill ``device`` for the graph ``ctx`` lowers (0 when ``ctx`` is not a
    ``LoweringContext``)."""
    graph = getattr(ctx, "graph", None)
    return graph.parallel_programs(device) if hasattr(graph, "parallel_programs") else 0
