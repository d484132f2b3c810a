"""Block sizes per kernel: a heuristic by default, optional timing of a few configs on CUDA.

The reduction heuristic is ``reduction_config`` (sizes and element sizes in, a ``Config`` with
its reason out); ``heuristic_config`` reads those sizes off a ``KernelSpec``. Its rules, for a
memory-bound kernel on an H200 (132 SMs, about 4.3 TB/s):

- *Persistent* (the whole row in registers, every stage straight through, x read from memory
  once) when RBLOCK, the row's next power of two, is at most ``persistent_rnumel`` (8192) values
  of 4 bytes: 16-bit and 32-bit values are both held as float32, so both persist up to 8192;
  8-byte values (float64, int64) up to half that. A looped kernel of several stages (softmax: max,
  sum of exp, normalize; layer norm: statistics, normalize) reads the row once per stage: 2-3x
  the traffic, which is what kept rows of 4096 at a third of the bandwidth.
- A block ``[XBLOCK, RBLOCK]`` of about ``TILE`` (4096) elements per program: narrow rows put
  several rows in one program (XBLOCK = TILE / RBLOCK, at most 256) so each still moves 8-16 KB;
  rows of 8192 take a tile of 8192 (one row). XBLOCK then halves while the grid would have
  fewer than ``MIN_PROGRAMS`` programs (about two per SM), down to 1.
- ``num_warps`` = tile / 512, between 4 (2 for tiles under 1024) and 16: 16 elements per
  thread (two 16-byte loads of bfloat16, four of float32), so a row of 4096 takes 8 warps, one
  of 8192 takes 16, tiles of 1024-2048 take 4. More elements per thread would spill
  registers in multi-stage kernels (softmax holds x and exp(x - max), layer norm x and
  x - mean); fewer leave loads too narrow and more programs waiting on their row.
- The values held are what the kernel's memory holds, widened to 4 bytes: loop-ir's CPU
  lowering accumulates float32 Welford in float64, which only the interpreter ever runs.
- *Looped* (rows longer than that): RBLOCK ``looped_rblock`` (2048), one row per program,
  ``looped_values_per_thread`` (8) values per thread (8 warps). Measured on the H200
  (benchmarks/gpu_bandwidth_sweep.py, bfloat16): log_softmax over rows of 32768 at 62% of the
  bandwidth, cross-entropy over 50257 at 48%, softmax over 50257 at 43% (RBLOCK 4096 at 16
  values per thread gave 62%, 45%, 35%; RBLOCK 1024 at 4 gave 53%, 45%, 48%). Rows that
  start on a 16-byte boundary with a length a multiple of 16 (``_aligned.on_vector_boundary``:
  every block is vector loads, no aligned walk with its masked first and last blocks) take
  ``looped_vector_scale`` (2) times the block at the same values per thread: RBLOCK 4096, 16
  warps. Session 18's sweeps on the H200, with the online softmax and the L2 eviction hints
  (RBLOCK 2048 at 8 warps / 4096 at 8 / 4096 at 16): log_softmax over rows of 32768 (bf16)
  65% / 79% / 81%; over rows of 16384, softmax bf16 78% / 77% / 75%, layer norm bf16 74% / 66%
  / 70%, softmax fp32 68% / 76% / 90%, layer norm fp32 69% / 71% / 72%; row sums 101-106%
  in all. The eviction hints pay only with the wider block (log_softmax: 66% without them).
  The walked rows of 50257 were no faster with wider blocks (47-50%: their first and last
  blocks are scalar accesses).
  Such rows of at least ``reread_rnumel`` (32768) values that the kernel reads in two r-loops
  (a softmax's max and sum, then its output) take 32 KB of the row per iteration at 32 warps
  (``_reread_config``: RBLOCK ``reread_rblock`` (16384) for 2-byte inputs, 8192 for 4-byte):
  about 260 rows resident instead of about 1000, so the rows walked between a row's two reads
  fit in L2. Session 19, log_softmax over rows of 32768 with the grouped online softmax: bf16
  84% at RBLOCK 4096 / 16 warps, 93% at 16384 / 16, 94% at 16384 / 32; float32 70% at 4096 /
  16, 75% at 16384 / 32, 88% at 8192 / 32. Rows of 16384 (session 18's sweep) ran half as
  fast at 16384 / 32, so they keep RBLOCK 4096.
  A row of unknown length (symbolic sizes) may be short, so it gets a small RBLOCK (at most
  128) and 16 rows per program.
- *Outer* reductions (the transposed layout, ``_layout.py``): XBLOCK 64 along the contiguous
  memory (full 128-byte lines), RBLOCK up to ``transposed_rblock`` (64) rows per iteration (a
  tile of 4096, ``transposed_values_per_thread`` (8) values per thread for each input read in
  full, twice that again for two inputs or more: a column sum of 256 MB of bfloat16 ran at 93%
  with 16 warps, 74% with 8, where the sums of a batch norm's backward (two inputs) ran at 80%
  with 8 warps and 59% with 16, and over channels-last images 84% with 4 warps against 79%
  with 8 (session 22));
  persistent only when the whole column fits beside at least 32 x in
  the same tile. Long, narrow ones are split over r (``split_chunks``). A looped one whose one
  reduction is a Welford over one input takes blocks of its own (``_welford_outer_config``:
  XBLOCK 128, RBLOCK 64, 64 values a thread, 4 warps).
- *Pointwise*: 4 warps, each thread moving 32 bytes of its narrowest value (XBLOCK 1024 for
  float32, 2048 for bfloat16; ``pointwise_xblock``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import sympy
import torch
from torchkiln_loop_ir.backend import BufferSpec, KernelSpec

from ._aligned import AlignedWalk, on_vector_boundary, walked_lanes, walked_rows
from ._layout import BlockLayout, choose_layout
from ._split import reduction_types, splittable
from .errors import CodegenError
from .options import TritonOptions

#: elements of a reduction program's block [XBLOCK, RBLOCK] (or [RBLOCK, XBLOCK]) per pass
TILE = 4096
#: a grid of fewer programs than this (about two per SM of an H200) leaves SMs idle
MIN_PROGRAMS = 264
#: XBLOCK of a reduction: more rows per program than this only lengthens the x masks
MAX_XBLOCK = 256
#: register elements of a persistent block per thread that ``num_warps`` aims at (looped
#: blocks: ``TritonOptions.looped_values_per_thread`` / ``transposed_values_per_thread``)
ELEMENTS_PER_THREAD = 16
#: elements of a looped reduction's block per iteration (one row of RBLOCK 1024 by default)
LOOPED_TILE = 1024
#: registers a thread of a 32-warp kernel that reads its rows twice (``_reread_config``) may
#: take: two programs a SM (65536 registers), as the rule counts its resident rows by. The
#: aligned walk's edges took 42-64 on Triton 3.6 (one program a SM: 53% of the bandwidth over
#: rows of 50257 bfloat16, 67% with the cap, where rows of 50256 ran at 73%); ptxas fits 32
#: without spilling
REREAD_REGISTERS = 32
#: rows longer than this many bytes, read twice, keep one program a SM instead: two would hold
#: 264 rows of more than 128 KB (34 MB+) between their two reads, past what the H200's L2
#: keeps (float32 rows of 50257, 200 KB: 65% at two programs a SM, 80% at one with RBLOCK
#: 16384, session 21; bfloat16 rows of 65536, 128 KB, 87% at two)
REREAD_TWO_PROGRAMS_BYTES = 131072


@dataclass(frozen=True)
class Config:
    """One launch configuration. ``looped`` selects the kernel shape, so it is fixed per source,
    as are ``transposed`` (the block layout of a reduction, ``_layout.py``) and ``split`` (at
    most this many r chunks reduced by separate programs into partials, then finished by a
    second kernel, ``_split.py``; 0 means no split). ``split`` itself is a launch parameter
    (the chunk count is worked out per call); ``partials`` (the partial buffers' dtypes) come
    from the generated source. ``maxnreg``: the most registers a thread may take (Triton's
    ``maxnreg``, passed to ptxas), 0 leaving it to ptxas. ``reason``: why the heuristic chose
    this (not compared)."""

    xblock: int
    rblock: int
    num_warps: int
    looped: bool
    transposed: bool = False
    split: int = 0
    partials: tuple[torch.dtype, ...] = ()
    maxnreg: int = 0
    rows: int = 0  # a mixed-order kernel's rows per program (its grid: xnumel / rows)
    walked: bool = False  # persistent, each row walked whole from its aligned start (_aligned)
    # a matmul template (``_template.py``): its programs, one a tile of the product, and its
    # software-pipelining stages (Triton's ``num_stages``); 0: not a template
    grid: int = 0
    num_stages: int = 0
    reason: str = field(default="", compare=False)

    def programs(self, xnumel: int) -> int:
        """The grid of a launch over ``xnumel`` (not split): a program per XBLOCK of x, or per
        ``rows`` for a mixed-order kernel, or ``grid`` for a matmul template."""
        if self.grid:
            return self.grid
        step = self.rows or self.xblock
        return (xnumel + step - 1) // step

    @property
    def compile_options(self) -> dict[str, int]:
        """The options a launch compiles with: ``num_warps``, and ``maxnreg`` and
        ``num_stages`` when set."""
        out = {"num_warps": self.num_warps}
        if self.maxnreg:
            out["maxnreg"] = self.maxnreg
        if self.num_stages:
            out["num_stages"] = self.num_stages
        return out


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _numel(ranges: Sequence[sympy.Expr]) -> int | None:
    """The product of ``ranges`` when it is a known integer, else None (symbolic sizes)."""
    total = sympy.Integer(1)
    for r in ranges:
        total = total * r
    total = sympy.sympify(total)
    return int(total) if total.is_Integer else None


def _prev_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n.bit_length() - 1)


def _warps(tile: int, per_thread: int = ELEMENTS_PER_THREAD) -> int:
    """``per_thread`` elements of a block of ``tile`` per thread (rounded down to a power of
    two: Triton takes no other warp count), at most 16 warps; at least 4 for a tile of 1024 or
    more (a lone row of 1024 when the grid is short: 8 elements per thread, so the row's loads
    spread over more lanes), else at least 2."""
    return max(4 if tile >= 1024 else 2, _prev_pow2(min(16, tile // (32 * per_thread))))


def value_itemsize(spec: KernelSpec) -> int:
    """The bytes a value of ``spec``'s memory takes in registers: 16-bit floats (and narrower
    types) are computed as 32-bit, 64-bit types take 8."""
    sizes = [
        spec.buffers[n].dtype.itemsize
        for n in (*spec.inputs, *spec.outputs)
        if n in spec.buffers and n not in spec.local_buffers
    ]
    return max([4, *sizes])


def widest_input_itemsize(spec: KernelSpec) -> int:
    """The bytes of the widest value ``spec`` reads from memory (4 when it reads none): a
    thread's 16-byte vector of that input holds ``16 // widest_input_itemsize`` values."""
    return max([spec.buffers[n].dtype.itemsize for n in spec.inputs if n in spec.buffers] or [4])


def heuristic_config(
    spec: KernelSpec, options: TritonOptions, layout: BlockLayout | None = None
) -> Config:
    """Pointwise: XBLOCK up to ``pointwise_xblock``; reductions: ``reduction_config`` of the
    spec's sizes, then split over r where ``split_chunks`` says so. ``layout`` is the
    reduction's block layout (None: ``choose_layout`` decides)."""
    xnumel = _numel(spec.xranges)
    xcap = _next_pow2(xnumel) if xnumel is not None else None
    if not spec.rranges:
        xblock = pointwise_xblock(spec, options)
        if xcap is not None:
            xblock = max(16, min(xblock, xcap))
        return Config(xblock, 1, 4 if xblock >= 512 else 2, False)
    if spec.row_programs:
        return mixed_order_config(spec, options)
    layout = layout or choose_layout(spec)
    sizes = (xnumel, _numel(spec.rranges), value_itemsize(spec), options)
    streams = full_size_inputs(spec)
    cfg = reduction_config(*sizes, transposed=layout.transposed, streams=streams)
    if layout.transposed and cfg.looped:
        cfg = _welford_outer_config(spec, options, cfg, xnumel, streams)
    rnumel = sizes[1]
    long_rows = bool(options.reread_rnumel and rnumel and rnumel >= options.reread_rnumel)
    whole: Config | None = None
    if (
        cfg.looped
        and not layout.transposed
        and options.aligned_rows
        and options.walked_rows_whole
        and rnumel
        and (walk := walked_rows(spec, layout)) is not None
    ):
        whole = _walked_whole_config(spec, options, rnumel, walk)
    if whole is not None:
        cfg = whole
    elif cfg.looped and not layout.transposed and on_vector_boundary(spec, layout):
        # looped rows only: the check replays the kernel's bodies
        cfg = reduction_config(*sizes, streams=streams, vector_rows=True)
        if long_rows:
            cfg = _reread_config(spec, options, cfg, rnumel)
    elif cfg.looped and not layout.transposed and long_rows and options.aligned_rows:
        walk = walked_rows(spec, layout)  # rows off a vector boundary, walked: vector loads too
        if walk is not None:
            cfg = _reread_config(spec, options, cfg, rnumel, walk)
    if cfg.looped:
        cfg = replace(cfg, split=split_chunks(spec, options, cfg.xblock, cfg.rblock))
    return cfg


#: a mixed-order kernel over rows of at most this RBLOCK takes several rows an iteration, a
#: tile of ``MIXED_NARROW_TILE`` values (``TritonOptions.mixed_rows`` 0): one row of 96 bf16
#: values an iteration moved 781 GB/s on an H100, eight 1721 (session 39)
MIXED_NARROW_RBLOCK = 128
MIXED_NARROW_TILE = 1024


def mixed_order_config(spec: KernelSpec, options: TritonOptions) -> Config:
    """A mixed-order kernel (``KernelSpec.row_programs``): each row whole (RBLOCK its length
    rounded up to a power of two), XBLOCK rows an iteration (``options.mixed_rows``, or for
    narrow rows a tile of ``MIXED_NARROW_TILE`` values; a power of two dividing the program's
    rows), ``options.mixed_values_per_thread`` values of the
    tile a thread."""
    rows = rows_per_program(spec)
    rnumel = _numel(spec.rranges)
    if rnumel is None:
        raise CodegenError(f"kernel {spec.name}: a mixed-order kernel's rows have a static length")
    rblock = _next_pow2(rnumel)
    wanted = options.mixed_rows or (
        MIXED_NARROW_TILE // rblock if rblock <= MIXED_NARROW_RBLOCK else 1
    )
    xblock = min(wanted, rows & -rows, MAX_XBLOCK)
    why = (
        f"persistent, mixed order: rows of {rnumel} (RBLOCK {rblock}) whole, {xblock} an "
        f"iteration, {rows} a program, {spec.row_programs} programs"
    )
    per_thread = options.mixed_values_per_thread
    if xblock == 1 and full_size_itemsize(spec) >= 4:
        # a row of 4-byte values an iteration: at 8 warps a float32 row of 4096 took 136
        # registers a thread (Triton 3.9's count, offline), one program a SM, 59% of the
        # bandwidth; 16 warps, 80% (session
        # 23, before pipelining). Two-byte rows (128 registers, two programs a SM) lost at
        # half the values a thread (69 -> 67%)
        per_thread = max(1, per_thread // 2)
        why += ", half the values a thread (one row of 4-byte values an iteration)"
    warps = _warps(xblock * rblock, per_thread)
    return Config(xblock, rblock, warps, False, rows=rows, reason=why)


def _reread_config(
    spec: KernelSpec,
    options: TritonOptions,
    cfg: Config,
    rnumel: int,
    walk: AlignedWalk | None = None,
) -> Config:
    """``cfg`` (looped vector rows of ``rnumel``), or RBLOCK ``options.reread_rblock`` at 32
    warps, one row per program, when the kernel reads its rows in two r-loops
    (``_eviction.reread_plan``, after the online softmax drops its sum's loop): see
    ``TritonOptions.reread_rnumel``. Rows that ``walk`` (``_aligned.py``) takes half that RBLOCK
    when its blocks cover fewer positions past the row (rows of 50257 bfloat16: 7 blocks of
    8192 cover 57344 positions, 4 of 16384 cover 65536, the last nearly all past the row)."""
    if not _reads_rows_twice(spec, options):
        return cfg
    # the same 32 KB of the row per iteration whatever its dtype: float32 rows at 16384 values
    # (16 a thread) ran at 75%, at 8192 at 88% (session 19)
    itemsize = widest_input_itemsize(spec)
    rblock = min(options.reread_rblock * 2 // itemsize, _next_pow2(rnumel))
    where = "on a 16-byte boundary"
    if rnumel * itemsize > REREAD_TWO_PROGRAMS_BYTES:
        # one program a SM: twice the row an iteration keeps as many bytes in flight, up to
        # 16 values a thread (float32 RBLOCK 16384: 62 registers, no spill)
        rblock = min(2 * rblock, 16 * 32 * 32, _next_pow2(rnumel))
        why = (
            f"looped: a row of {rnumel} ({rnumel * itemsize // 1024} KB), read in two "
            f"r-loops: RBLOCK {rblock} at 32 warps, 1 row per program and one program a SM "
            "(two would keep more rows between their reads than L2 holds)"
        )
        return Config(1, rblock, 32, True, reason=why)
    if walk is not None:
        where = "walked from 16-byte boundaries"
        half = rblock // 2
        if walked_lanes(rnumel, half, walk.vec) < walked_lanes(rnumel, rblock, walk.vec):
            rblock = half
    why = (
        f"looped: a row of {rnumel} {where}, read in two r-loops: RBLOCK "
        f"{rblock} at 32 warps, 1 row per program (few rows resident: the row's second read "
        f"finds it in L2), at most {REREAD_REGISTERS} registers a thread (two programs a SM)"
    )
    return Config(1, rblock, 32, True, maxnreg=REREAD_REGISTERS, reason=why)


def _walked_whole_config(
    spec: KernelSpec, options: TritonOptions, rnumel: int, walk: AlignedWalk
) -> Config | None:
    """One persistent block per row, walked from its aligned start (``_aligned.AlignedWalk``'s
    ``whole_row``), for rows of 2-byte values that a looped kernel would read in two r-loops,
    when their walked positions (``rnumel + vec - 1`` rounded up to a power of two) are at most
    ``options.walked_rows_whole``, at ``options.walked_rows_whole_warps`` (fewer for a short
    row: at least 8 values a thread); None otherwise (the looped walk)."""
    if not options.walked_rows_whole or widest_input_itemsize(spec) > 2:
        return None
    if not _reads_rows_twice(spec, options):
        return None
    rblock = _next_pow2(rnumel + walk.vec - 1)
    if rblock > options.walked_rows_whole:
        return None
    # at most walked_rows_whole_warps, at least 8 values a thread (a short row, fewer warps)
    warps = min(options.walked_rows_whole_warps, max(4, rblock // (32 * 8)))
    why = (
        f"persistent, walked: a row of {rnumel} 2-byte values (RBLOCK {rblock} from its aligned "
        f"start) held whole at {warps} warps, one row a program: read from memory once, where "
        "a loop reads it twice"
    )
    return Config(1, rblock, warps, False, walked=True, reason=why)


def _reads_rows_twice(spec: KernelSpec, options: TritonOptions) -> bool:
    """Whether ``spec``, looped, reads its rows in two r-loops (``_eviction.reread_plan``, after
    the online softmax drops its sum's loop)."""
    from ._eviction import reread_plan
    from ._online import online_plan

    plan = online_plan(spec, looped=True, split=False, enabled=options.online_softmax)
    absorbed = None if plan is None else plan.stage + 1
    return bool(reread_plan(spec, looped=True, split=False, absorbed=absorbed, enabled=True))


def _full_size_inputs(spec: KernelSpec) -> list[BufferSpec]:
    """The inputs ``spec`` reads one value of per (x, r) point (not the per-row statistics it
    reads again); unknown sizes count as full size."""
    total = _numel((*spec.xranges, *spec.rranges))
    out = []
    for name in spec.inputs:
        b = spec.buffers.get(name)
        if b is None or name in spec.local_buffers:
            continue
        n = _numel(b.size)
        if total is None or n is None or n >= total:
            out.append(b)
    return out


def full_size_inputs(spec: KernelSpec) -> int:
    """How many inputs a reduction reads in full (``_full_size_inputs``), at least 1."""
    return max(1, len(_full_size_inputs(spec)))


def full_size_itemsize(spec: KernelSpec) -> int:
    """The bytes of the widest value ``spec`` reads in full (``_full_size_inputs``), 4 when
    it reads none."""
    return max([b.dtype.itemsize for b in _full_size_inputs(spec)] or [4])


def rows_per_program(spec: KernelSpec) -> int:
    """The rows each program of a mixed-order kernel (``KernelSpec.row_programs``) loops over."""
    rows = _numel(spec.xranges)
    if rows is None:
        raise CodegenError(f"kernel {spec.name}: a mixed-order kernel's rows have a static count")
    return rows // spec.row_programs


def mixed_stages(spec: KernelSpec, options: TritonOptions) -> int:
    """How deep a mixed-order loop of one row an iteration is pipelined
    (``TritonOptions.mixed_stages``; 0: 4 for rows of at most 2048 2-byte values, else 3)."""
    if options.mixed_stages:
        return options.mixed_stages
    rnumel = _numel(spec.rranges)
    short = rnumel is not None and rnumel <= 2048
    return 4 if short and full_size_itemsize(spec) <= 2 else 3


def pointwise_xblock(spec: KernelSpec, options: TritonOptions) -> int:
    """XBLOCK of a pointwise kernel (4 warps): ``options.pointwise_xblock`` for 4-byte values,
    scaled so that each thread moves 32 bytes of the narrowest value in memory (twice the elements for bfloat16: two 16-byte loads per thread per input, which
    keeps a gelu + residual at 98% of the H200's bandwidth where 8 elements gave 88%)."""
    sizes = [
        spec.buffers[n].dtype.itemsize
        for n in (*spec.inputs, *spec.outputs)
        if n in spec.buffers and n not in spec.local_buffers
    ]
    narrowest = min([8, *sizes]) if sizes else 4
    return max(1, options.pointwise_xblock * 4 // max(2, narrowest))


def reduction_config(
    xnumel: int | None,
    rnumel: int | None,
    itemsize: int,
    options: TritonOptions,
    *,
    transposed: bool = False,
    streams: int = 1,
    vector_rows: bool = False,
) -> Config:
    """Blocks, warps and persistent-or-looped for a reduction of ``xnumel`` rows of ``rnumel``
    values (None: not known before the call) held as ``itemsize``-byte values in registers, in
    the default or the transposed (outer reduction) layout, reading ``streams`` inputs of that
    size, whose rows start on a 16-byte boundary with a length a multiple of 16 when
    ``vector_rows``; the module docstring gives the rules, ``Config.reason`` the one that
    applied. No split (``split_chunks`` decides that)."""
    xcap = _next_pow2(xnumel) if xnumel is not None else MAX_XBLOCK
    limit = options.persistent_rnumel * 4 // max(4, itemsize)
    if transposed:
        return _transposed_config(xnumel, rnumel, xcap, limit, options, streams)
    if rnumel is not None and _next_pow2(rnumel) <= limit:
        rblock = _next_pow2(rnumel)
        xblock = _fill(xnumel, min(max(1, TILE // rblock), MAX_XBLOCK, xcap))
        why = (
            f"persistent: a row of {rnumel} (RBLOCK {rblock}) fits in registers "
            f"(<= {limit} {itemsize}-byte values): each row is read from memory once"
        )
        return Config(xblock, rblock, _warps(xblock * rblock), False, reason=why)
    if rnumel is None:
        rblock = min(options.looped_rblock, 128)
        xblock = max(1, min(TILE // 2 // rblock, xcap))
        why = (
            f"looped: the row length is not known (it may be short: RBLOCK {rblock}, "
            f"{xblock} rows per program)"
        )
        return Config(xblock, rblock, _warps(xblock * rblock), True, reason=why)
    per_thread = options.looped_values_per_thread  # vector rows too: a wider block, more warps
    scale = options.looped_vector_scale if vector_rows else 1
    rblock = min(options.looped_rblock * scale, _next_pow2(rnumel))
    xblock = _fill(xnumel, min(max(1, LOOPED_TILE // rblock), MAX_XBLOCK, xcap))
    why = (
        f"looped: a row of {rnumel} is longer than the {limit} {itemsize}-byte values kept "
        f"in registers: RBLOCK {rblock} per iteration, {xblock} row(s) per program, "
        f"{per_thread} values per thread"
        + (
            " (rows on a 16-byte boundary: every block's accesses are vectors)"
            if vector_rows
            else ""
        )
    )
    warps = _warps(xblock * rblock, per_thread)
    return Config(xblock, rblock, warps, True, reason=why)


def _fill(xnumel: int | None, xblock: int) -> int:
    """``xblock`` halved while the grid would have fewer than ``MIN_PROGRAMS`` programs."""
    if xnumel is None:
        return xblock
    while xblock > 1 and -(-xnumel // xblock) < MIN_PROGRAMS:
        xblock //= 2
    return xblock


def _transposed_config(
    xnumel: int | None,
    rnumel: int | None,
    xcap: int,
    limit: int,
    options: TritonOptions,
    streams: int = 1,
) -> Config:
    """Blocks of an outer reduction (r on axis 0, x on axis 1, memory contiguous along x): a
    wide XBLOCK (64 contiguous elements is a 128-byte line of bfloat16, two of float32) and
    RBLOCK rows so that the tile is about ``TILE``; persistent only when the whole column fits
    in that tile beside at least 32 x (64-128 contiguous bytes per row of the block). Few
    columns take a narrower XBLOCK when ``options.transposed_min_programs`` asks for more
    programs than 64 would give (down to 16)."""
    xblock = max(1, min(options.transposed_xblock, xcap))
    narrowed = ""
    if options.transposed_min_programs and xnumel is not None:
        wide = xblock
        while xblock > 16 and -(-xnumel // xblock) < options.transposed_min_programs:
            xblock //= 2
        if xblock < wide:
            narrowed = (
                f"; XBLOCK {xblock}, not {wide}: {-(-xnumel // xblock)} programs over "
                f"{xnumel} columns"
            )
    if (
        rnumel is not None
        and _next_pow2(rnumel) <= limit
        and _next_pow2(rnumel) * max(xblock, 32) <= TILE
    ):
        rblock = _next_pow2(rnumel)
        why = (
            f"persistent outer reduction: a column of {rnumel} (RBLOCK {rblock}) beside "
            f"XBLOCK {xblock} fits in a tile of {TILE}{narrowed}"
        )
        return Config(xblock, rblock, _warps(xblock * rblock), False, transposed=True, reason=why)
    rblock = max(1, min(options.transposed_rblock, options.transposed_tile // xblock))
    # two inputs or more read in full: twice that again. Session 22 on the H200: a batch norm's
    # backward sums over channels-last images (two inputs) went from 79% to 84% of the bandwidth
    # in bfloat16 and from 90% to 95% in float32 at 32 values a thread (4 warps) against 16 (8
    # warps), a layer norm's weight and bias gradients 58% to 59%; a column sum of one input
    # fell from 92% to 74% at 16 (so one input keeps 8)
    per_thread = options.transposed_values_per_thread * min(streams, 4) * (2 if streams > 1 else 1)
    why = (
        f"looped outer reduction: XBLOCK {xblock} along contiguous memory, RBLOCK {rblock} "
        f"rows per iteration, {per_thread} values per thread ({streams} input(s) read in full)"
        f"{narrowed}"
    )
    warps = _warps(xblock * rblock, per_thread)
    return Config(xblock, rblock, warps, True, transposed=True, reason=why)


def _welford_outer_config(
    spec: KernelSpec, options: TritonOptions, cfg: Config, xnumel: int | None, streams: int
) -> Config:
    """A looped outer reduction whose one reduction is a Welford (a batch norm's statistics over
    channels-last images: three accumulators a value, their lanes combined twice after the
    loop; its three outputs replay it three times) over one input read in full takes
    ``options.transposed_welford_xblock`` (128) columns, a tile of
    ``transposed_welford_tile`` (8192: RBLOCK 64) and
    ``transposed_welford_values_per_thread`` (64: 4 warps) where that still gives
    ``transposed_welford_min_programs`` (128) programs; else ``cfg`` (xblock 0 turns the rule
    off). The common blocks (XBLOCK 64, RBLOCK 64, 16 warps) ranked 29th to 36th of the 95
    launch configurations in all four sweeps of ResNet-50's layer1 statistics at batch 64
    (``gpu_bandwidth_sweep.py``: the H200 in sessions 18 and 27 in bf16, an H100 in session 32
    in bf16 and fp32), about 55 us in bf16 where these blocks took 46.0, 45.5 and 49.0 (1st to
    5th each time; fp32 78.6 against 86.2). Then timed against the common blocks on the H100:
    bf16 1742 -> 2084 GB/s, fp32 2371 -> 2602. Offline (sm_90, Triton 3.6): 255 registers, no
    spill, 6.9 instructions a value in the loop. Those registers leave no room for another
    reduction's accumulators or a second input's loads, so such kernels keep ``cfg``. Session
    27's 32 values a thread (8 warps) won once on the H200 and lost on the H100 (sessions 31
    and 32: 1575 GB/s against 1747)."""
    xblock = options.transposed_welford_xblock
    if (
        not xblock
        or xnumel is None
        or streams > 1
        or -(-xnumel // xblock) < options.transposed_welford_min_programs
        or reduction_types(spec) != {"welford_reduce"}
    ):
        return cfg
    rblock = max(1, min(cfg.rblock, options.transposed_welford_tile // xblock))
    per_thread = options.transposed_welford_values_per_thread
    why = (
        f"looped outer Welford reduction: XBLOCK {xblock} along contiguous memory, RBLOCK "
        f"{rblock} rows per iteration, {per_thread} values per thread (few warps combine the "
        "lanes)"
    )
    warps = _warps(xblock * rblock, per_thread)
    return replace(cfg, xblock=xblock, rblock=rblock, num_warps=warps, reason=why)


def split_chunks(spec: KernelSpec, options: TritonOptions, xblock: int, rblock: int) -> int:
    """How many r chunks to split a looped reduction into (0: none): when the x blocks alone
    give fewer than a quarter of ``options.split_programs`` programs (about two per SM of an
    H200: a split costs a second launch, worth it only below that), enough chunks that
    ``options.split_programs`` programs run, each chunk still
    at least ``options.split_min_rchunk`` rows (the partials then cost a small fraction of
    the input's traffic), at most ``options.split_max_chunks``. Only kernels of known sizes whose
    reductions can be combined from partials (``_split.splittable``)."""
    xnumel, rnumel = _numel(spec.xranges), _numel(spec.rranges)
    if options.split_max_chunks < 2 or xnumel is None or rnumel is None:
        return 0
    xprograms = -(-xnumel // xblock)
    if xprograms * 4 > options.split_programs:
        return 0
    chunks = min(
        options.split_max_chunks,
        -(-options.split_programs // xprograms),
        rnumel // max(options.split_min_rchunk, rblock),
    )
    if chunks < 2 or not splittable(spec):
        return 0
    return chunks


def candidate_configs(base: Config) -> list[Config]:
    """A few neighbours of the heuristic choice (same kernel shape) for real autotuning. An
    outer reduction (transposed) also tries a shorter RBLOCK (a smaller accumulator tile at the
    same coalesced XBLOCK); a split one, half and twice as many chunks (the chunk count is a
    launch parameter: the same source)."""
    out = [base]
    for xb in (base.xblock // 2, base.xblock * 2):
        if base.rows and (xb < 1 or base.rows % xb):
            continue  # a mixed-order kernel's program takes whole iterations of rows
        if 1 <= xb <= 4096 and xb * base.rblock <= 16384:
            out.append(replace(base, xblock=xb))
    for nw in (base.num_warps // 2, base.num_warps * 2):
        if 1 <= nw <= 16:
            out.append(replace(base, num_warps=nw))
    if base.looped and base.rblock * 2 * base.xblock <= 16384:
        out.append(replace(base, rblock=base.rblock * 2))
    if base.transposed and base.looped and base.rblock >= 2:
        out.append(replace(base, rblock=base.rblock // 2))
    if base.split:
        out += [replace(base, split=n) for n in (base.split // 2, base.split * 2) if n >= 2]
    return list(dict.fromkeys(out))


def pick_fastest(configs: Sequence[Config], run: Callable[[Config], None]) -> Config:
    """Time ``run(config)`` for each config with triton.testing.do_bench; return the fastest."""
    from triton.testing import do_bench

    best, best_ms = configs[0], float("inf")
    failures: list[str] = []
    for cfg in configs:
        try:
            ms = do_bench(lambda cfg=cfg: run(cfg), warmup=5, rep=20)
        except Exception as e:  # noqa: BLE001 - a config can fail to compile (registers): skip it
            failures.append(f"{cfg}: {type(e).__name__}")
            ms = float("inf")
        if ms < best_ms:
            best, best_ms = cfg, ms
    return best
