"""The aligned walk: a looped row reduction whose rows start off a 16-byte boundary, or whose
length is not a multiple of 16, loads and stores the inside of each row with vector accesses.

Triton vectorises a load (16 bytes per thread: 8 bfloat16 or 4 float32 values) only when it can
prove, from its own integer analysis, that the address of each group of lanes is a multiple of
16 bytes and that the mask is constant over each group. A row of ``rnumel`` values at
``base + 50257 * x`` (GPT-2's vocabulary) fails both: ``50257 * x`` has no known divisor, and
the mask ``rindex < rnumel`` (an integer argument not divisible by 16, which Triton does not
specialise) varies lane by lane. Every block is then loaded one value per instruction: a
softmax over rows of 50257 moved about a quarter of the bandwidth of rows of 4096.

With the walk, each program starts at its row's start rounded down to the vector width
``VEC`` (16 bytes of the narrowest type accessed along the row), ``rrow = B // VEC * VEC``
for the row start ``B(x)`` of the kernel's *primary* access (the residue class, mod ``VEC``,
of the row starts that move the most bytes), and ``rshift = B - rrow``. A block covers the
aligned positions ``rpos = roffset + arange(RBLOCK)`` and the row index is ``rindex = rpos -
rshift``: the reductions, ``index_expr`` and every other address see the row's true indices.
Each stage's r-loop becomes three loops over the same body:

- the first block ``[0, RBLOCK)``, masked (``0 <= rindex < rnumel``: the lanes before the row's
  start are masked out, so a reduction takes its identity there and no store happens), its
  bound ``tl.minimum(rnumel, RBLOCK)`` (the same one block) known only at run time, so that
  Triton keeps it a loop rather than unroll it and share its row-invariant masks with the next
  r-loop's first block (values held live in between: 42 registers a thread instead of 32);
- the interior blocks ``[RBLOCK, rnumel // RBLOCK * RBLOCK)``, with ``rmask`` all true: they lie
  inside every row whatever its shift (``rshift < VEC <= RBLOCK``), so the only mask left is
  ``xmask``, constant along the row (a block narrower than a vector, RBLOCK < VEC, leaves the
  first loop the blocks up to the first multiple of RBLOCK at or past VEC);
- the last block(s), from ``max(rnumel // RBLOCK, 1) * RBLOCK`` up to ``rnumel + VEC - 1``,
  masked again (a block entirely past a row's end is masked out entirely).

The blocks are visited in row order, so per-lane reductions that depend on order (argmax's
first index) keep it. An access of the primary class at ``rindex + B_i(x)`` is addressed as
``rrow + (B_i - B) + rpos``: ``rrow`` is ``// VEC * VEC`` (divisible by ``VEC`` in Triton's
analysis, no hint that could be wrong), ``B_i - B`` has coefficients divisible by ``VEC`` and
``rpos`` is a multiple of RBLOCK plus an arange; with a 16-byte aligned pointer argument (Triton
specialises those) the interior loads and stores become 16-byte vector accesses (checked on the
PTX of an sm_90 compile: ``ld.global.v4.b32`` / ``st.global.v4.b32``). The first and last
blocks' are vectors too: their loads take ``rload`` (``load_masks``), and a store is split in
two, ``rstore``'s lanes as vectors, then the at most ``VEC - 1`` lanes at each end of the row
one at a time (``store_masks``: a store must not touch a neighbouring row's lanes; all of the
first block's stores were scalar before, 63% of a float32 softmax's bandwidth over rows of
50257 against 78% split, session 21). Every other access
(a broadcast weight, another stride, a strided or indirect one) keeps its usual address in
``rindex``: right, and vectorised only where it was before. A tensor whose data pointer is not
16-byte aligned (a slice at an odd offset) is not specialised, so its accesses stay scalar; the
results are the same.

Where it applies (``aligned_plan``): a looped, unsplit reduction kernel in the default block
layout whose row length is a known integer of at least ``MIN_RNUMEL`` and which has at least one
access contiguous along the row, unless the rows already start on a vector boundary and their
length is a multiple of 16 (then the plain loop vectorises). Persistent kernels keep one
masked block per row. ``TritonOptions.aligned_rows`` turns it off, for comparison.

Whole rows (``AlignedWalk.whole_row``, ``TritonOptions.walked_rows_whole``): a persistent kernel
of one row a program whose RBLOCK covers the row and its shift (``rnumel + vec - 1``
positions) takes the same aligned start and the last block's masks over its one block: the
row is loaded as vectors, held in registers, and stored as whole vectors (``rstore``). Its
edge lanes (at most ``vec - 1`` at each end, the vectors it shares with its neighbours) are
not stored from that block: a predicated scalar store over every lane a thread holds cost
about 11 of 35 sm_90 instructions a value (rows of 50257 bfloat16). The nodes that store the
walked outputs run again after it over a block of ``2 * vec`` lanes, the row's first vector
and the one holding its end (``edge_lines``), reading the reductions' results already made,
and store those lanes one at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sympy
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.indexing import index_symbol

from ._flat_index import RFLAT, XFLAT, FlatIndex
from ._layout import BlockLayout, memory_accesses
from .printer import texpr


class EdgeUnavailable(Exception):
    """A whole walked row's edge lanes cannot be stored from a block of their own (a node to run
    again reduces, or stores atomically): the kernel stores them from the row's block."""


#: rows shorter than this keep the plain loop (one or two blocks per row: little to gain)
MIN_RNUMEL = 512
#: the widest vector access of a thread (ld.global.v4.b32)
VECTOR_BYTES = 16

_Residue = frozenset[tuple[sympy.Expr, int]]


@dataclass(frozen=True)
class AlignedWalk:
    """The walk of one kernel (see the module docstring): ``vec`` values per vector,
    ``base`` the primary row start (x variables only), ``residue`` its coefficients mod
    ``vec`` (accesses with the same residue share the alignment)."""

    vec: int
    base: sympy.Expr
    residue: _Residue
    rvar: sympy.Symbol | None  # the r variable that is the flat rindex (one r range), or None
    rnumel: int  # the row's length
    sizes: frozenset[sympy.Symbol] = frozenset()  # the kernel's size arguments

    @property
    def note(self) -> str:
        return (
            f"aligned walk: each row from its start rounded down to {self.vec} values, "
            "interior blocks unmasked (16-byte vector accesses)"
        )

    def head(self) -> list[str]:
        """The per-row lines (after the x variables): the aligned row start and the shift."""
        b = texpr(self.base)
        return [f"rrow = ({b}) // {self.vec} * {self.vec}", f"rshift = ({b}) - rrow"]

    def pointer(self, arg: str, index: sympy.Expr, flat: FlatIndex) -> str | None:
        """The address of ``arg[index]`` inside the walk's loops for an access ``rindex +
        B_i(x)`` of the primary residue class: the aligned row start, ``B_i - base`` (a
        multiple of ``vec``) and the block's aligned positions. None for any other access (it
        keeps its usual address)."""
        start = _row_start(index, flat, self.rvar, self.sizes)
        if start is None or _residue(start, self.vec) != self.residue:
            return None
        off = sympy.expand(start - self.base)
        row = "rrow" if off == 0 else f"(rrow + ({texpr(off)}))"
        return f"{arg} + ({row} + rpos)"

    def whole_row(self, r_shape: str) -> list[str]:
        """The lines that define a persistent kernel's row masks when its one block covers the
        whole row from the aligned start (positions ``[0, RBLOCK)``, at least ``rnumel + vec -
        1`` of them, asserted at compile time): ``rmask`` the row's lanes, ``rload`` whole
        vectors from the aligned start to the vector boundary at or after the row's end (as the
        last block's, ``load_masks``), ``rstore`` the whole vectors inside the row and
        ``redge`` the rest of ``rmask`` (``store_masks``)."""
        span, vec = self.rnumel + self.vec - 1, self.vec
        _, tail_load = self.load_masks("RBLOCK", r_shape)
        return [
            f"tl.static_assert(RBLOCK >= {span}, 'a walked row needs RBLOCK >= {span}')",
            "rpos = rbase",
            "rindex = rpos - rshift",
            # the row's lanes from per-row bounds: no subtraction a lane
            f"rmask = (rpos >= rshift) & (rpos < rshift + {self.rnumel})",
            tail_load,
            f"rstore = (rpos >= {vec}) & (rpos < (rshift + {self.rnumel}) // {vec} * {vec})",
            "redge = rmask & ~rstore",
        ]

    @property
    def edge_lanes(self) -> int:
        """The lanes of ``edge_lines``' block: the row's first vector and its last."""
        return 2 * self.vec

    def edge_lines(self) -> list[str]:
        """The lines that rebind the whole-row block's names (after its stages, default layout)
        to a block of ``edge_lanes`` positions: ``[0, vec)`` from the aligned start and the
        vector at the vector boundary at or before the row's end, the lanes ``whole_row``'s
        ``rstore`` leaves out. ``rmask`` (the row's lanes among them) is the loads' mask there
        (``rload``: only the row's values are read) and the stores' (``redge``)."""
        vec, n = self.vec, self.edge_lanes
        tail = f"(rshift + {self.rnumel}) // {vec} * {vec}"
        return [
            f"rbase = tl.arange(0, {n})[None, :]",
            f"rpos = tl.where(rbase < {vec}, rbase, {tail} + (rbase - {vec}))",
            "rindex = rpos - rshift",
            f"rmask = (rpos >= rshift) & (rpos < rshift + {self.rnumel})",
            "rload = rmask",
            "redge = rmask",
        ]

    def loops(self, body: Sequence[str], rlines: Sequence[str], r_shape: str) -> list[str]:
        """A looped stage's ``body`` as the three loops of the walk (indented for the kernel).
        Each loop defines ``rmask`` (the row's lanes: reductions and other stores), ``rload``
        (the mask of the walk's own loads, ``pointer``; see ``load_masks``), and ``rstore`` and
        ``redge`` (the walk's own stores, in two parts: ``store_masks``)."""
        edge = "rmask = (rindex >= 0) & (rindex < rnumel)"
        # the first block past the shift: RBLOCK, unless a block is narrower than a vector
        first = f"(RBLOCK + {self.vec - 1}) // RBLOCK * RBLOCK"
        inner = "rnumel // RBLOCK * RBLOCK"
        head_load, tail_load = self.load_masks(first, r_shape)
        head_store, tail_store = self.store_masks(first)
        edge_store = "redge = rmask & ~rstore"
        parts = [
            (
                # the same blocks as range(0, first) (a row is longer than the first block,
                # or fits in one): a bound known only at run time keeps this a loop, where a
                # literal one-trip loop is unrolled and its row-invariant masks and addresses
                # shared with the next r-loop's first block, held live in between (42
                # registers a thread at RBLOCK 8192 and 32 warps, not 32, on Triton 3.6: one
                # program a SM instead of two, 53% of the bandwidth instead of 73%)
                f"range(0, tl.minimum(rnumel, {first}), RBLOCK)",
                "the row's first block, from its aligned start",
                [edge, head_load, head_store, edge_store],
            ),
            (
                f"range({first}, {inner}, RBLOCK)",
                "blocks inside the row: no mask, vector accesses",
                [
                    f"rmask = tl.full({r_shape}, 1, tl.int1)",
                    "rload = rmask",
                    "rstore = rmask",
                    f"redge = tl.full({r_shape}, 0, tl.int1)",
                ],
            ),
            (
                f"range(tl.maximum({inner}, {first}), rnumel + {self.vec - 1}, RBLOCK)",
                "the row's last block(s)",
                [edge, tail_load, tail_store, edge_store],
            ),
        ]
        out: list[str] = []
        for bounds, why, masks in parts:
            out.append(f"    for roffset in {bounds}:  # {why}")
            lines = ["rpos = roffset + rbase", "rindex = rpos - rshift", *masks, *rlines, *body]
            out += ["        " + ln for ln in lines]
        return out

    def load_masks(self, first: str, r_shape: str) -> tuple[str, str]:
        """``rload`` in the first and the last blocks: masks constant over each vector, so the
        walk's loads there are vector loads too (Triton vectorises a masked load only then).

        - First block(s), positions ``[0, first)``: every position lies between the vector
          boundary at or before the row's start (``rrow``, at least 0) and the row's end
          whenever ``first <= (rnumel - vec + 1) // vec * vec`` (a literal: true for every block
          of at most about a row), so nothing is masked; a longer first block keeps ``rmask``.
          The lanes before the row's start read the buffer's values there (an earlier row's
          last values), which ``rmask`` keeps out of every reduction and store.
        - Last block(s): positions up to the vector boundary at or after the row's end,
          ``(rshift + rnumel + vec - 1) // vec * vec`` (divisible by ``vec`` in Triton's
          analysis). The lanes past the row's end read at most ``vec - 1`` values of the next
          row, or past the buffer's last value inside its last 16-byte vector (the same vector
          as a value the row reads: no other memory), and ``rmask`` keeps them out too."""
        head = f"rload = tl.full({r_shape}, 1, tl.int1) if {first} <= {self._fits} else rmask"
        tail = f"rload = rpos < (rshift + {self.rnumel + self.vec - 1}) // {self.vec} * {self.vec}"
        return head, tail

    @property
    def _fits(self) -> int:
        """The longest first block whose positions all lie inside the row, whatever its shift."""
        return (self.rnumel - self.vec + 1) // self.vec * self.vec

    def store_masks(self, first: str) -> tuple[str, str]:
        """``rstore`` in the first and the last blocks: the lanes of ``rmask`` whose whole vector
        lies inside the row, a mask constant over each vector, so a walked store of them is a
        vector store (``kernel``'s store writes ``rstore``'s lanes, then ``redge = rmask &
        ~rstore``'s one at a time: at most ``vec - 1`` lanes at each end of the row).

        - First block: the positions from ``vec`` on (past the row's start, ``rshift < vec``)
          up to ``first``, inside the row whenever ``first`` fits as for ``load_masks``; a longer
          first block stores ``rmask``'s lanes one at a time.
        - Last block(s): the positions below the vector boundary at or before the row's end,
          ``(rshift + rnumel) // vec * vec``, all at least ``first >= vec`` (past the start)."""
        inside = f"(rpos >= {self.vec}) & rmask"
        head = f"rstore = (rpos >= {self.vec}) if {first} <= {self._fits} else {inside}"
        tail = f"rstore = rpos < (rshift + {self.rnumel}) // {self.vec} * {self.vec}"
        return head, tail


def _rvar(spec: KernelSpec) -> sympy.Symbol | None:
    """The one r variable equal to the flat rindex (a single range of size other than 1)."""
    sized = [i for i, s in enumerate(spec.rranges) if sympy.sympify(s) != 1]
    return index_symbol("r", sized[0]) if len(sized) == 1 else None


def _row_start(
    index: sympy.Expr, flat: FlatIndex, rvar: sympy.Symbol | None, sizes: frozenset[sympy.Symbol]
) -> sympy.Expr | None:
    """``B(x)`` when ``index`` is ``rindex + B(x)`` (contiguous along the row; only x variables
    and the kernel's size arguments in B), else None."""
    index = flat.rewrite(sympy.sympify(index))
    if rvar is not None:
        index = index.subs(rvar, RFLAT)
    start = sympy.expand(index - RFLAT)
    if any(not (_is_x(s) or s in sizes) for s in start.free_symbols):
        return None  # still along r (a stride other than 1), or indirect / size symbols
    return start


def _is_x(sym: sympy.Symbol) -> bool:
    """An x variable (``x0``, ``x1``, ...) or the flat ``xindex`` of ``_flat_index.py``."""
    return sym == XFLAT or (sym.name.startswith("x") and sym.name[1:].isdigit())


def _residue(start: sympy.Expr, vec: int) -> _Residue | None:
    """The coefficients of polynomial ``start`` (in x variables and sizes) mod ``vec``, the
    nonzero ones; None when it is not a polynomial with integer coefficients (a floor division
    of x, say). Row starts of equal residues differ by a multiple of ``vec``."""
    out = set()
    for term, coeff in start.as_coefficients_dict().items():
        if not coeff.is_Integer:
            return None
        if term != 1 and not all(isinstance(f, sympy.Symbol) for f in sympy.Mul.make_args(term)):
            return None
        if int(coeff) % vec:
            out.add((term, int(coeff) % vec))
    return frozenset(out)


def aligned_plan(
    spec: KernelSpec,
    *,
    looped: bool,
    split: bool,
    layout: BlockLayout,
    enabled: bool,
    whole: bool = False,
) -> AlignedWalk | None:
    """The walk for ``spec`` (see the module docstring), or None for the plain r-loop;
    ``whole``: a persistent kernel's one block per row (``AlignedWalk.whole_row``)."""
    if not (enabled and (looped or whole) and not split):
        return None
    rows = _row_class(spec, layout)
    if rows is None or rows[0] is None:
        return None  # no row access to align, or rows already on a vector boundary
    return rows[0]


def on_vector_boundary(spec: KernelSpec, layout: BlockLayout) -> bool:
    """Whether ``spec``'s rows (of a known length of at least ``MIN_RNUMEL``) start on a 16-byte
    boundary and their length is a multiple of 16, so that a plain r-loop's loads and stores of
    them are vector accesses without the walk (``autotune`` gives such rows wider blocks)."""
    rows = _row_class(spec, layout)
    return rows is not None and rows[0] is None


def walked_rows(spec: KernelSpec, layout: BlockLayout) -> AlignedWalk | None:
    """The walk ``spec``'s rows would take when looped and unsplit (``aligned_plan``'s answer
    with the option on), or None (rows on a vector boundary, or nothing to align)."""
    rows = _row_class(spec, layout)
    return None if rows is None else rows[0]


def walked_lanes(rnumel: int, rblock: int, vec: int) -> int:
    """Positions a walk over a row of ``rnumel`` visits in blocks of ``rblock`` (the loops of
    ``AlignedWalk.loops``): its blocks times ``rblock``, the lanes past the row included."""
    first = (rblock + vec - 1) // rblock * rblock  # where the first loop ends
    inner = rnumel // rblock * rblock  # where the inside loop ends
    blocks = first // rblock + max(0, inner - first) // rblock
    blocks += max(0, -(-(rnumel + vec - 1 - max(inner, first)) // rblock))  # the last loop
    return blocks * rblock


def _row_class(spec: KernelSpec, layout: BlockLayout) -> tuple[AlignedWalk | None] | None:
    """None when ``spec`` has no row access to align (short, symbolic or transposed rows, no
    access contiguous along r); else a 1-tuple of the walk, or of None when the rows need no
    walk (already on a vector boundary, of a length a multiple of 16)."""
    if not spec.rranges or layout.transposed:
        return None
    rnumel = sympy.Integer(1)
    for s in spec.rranges:
        rnumel = rnumel * sympy.sympify(s)
    if not rnumel.is_Integer or int(rnumel) < MIN_RNUMEL:
        return None
    accesses = memory_accesses(spec, loop_only=True)
    if accesses is None:
        return None
    rvars = [index_symbol("r", i) for i in range(len(spec.rranges))]
    flat, rvar = FlatIndex(spec.xranges, spec.rranges), _rvar(spec)
    sizes = frozenset(spec.size_args)
    starts: list[tuple[sympy.Expr, int]] = []
    for name, index in accesses:
        if not (index.free_symbols & set(rvars)):
            continue
        start = _row_start(index, flat, rvar, sizes)
        if start is not None:
            starts.append((start, spec.buffers[name].dtype.itemsize))
    if not starts:
        return None
    vec = VECTOR_BYTES // min(max(1, min(size for _, size in starts)), VECTOR_BYTES)
    weight: dict[_Residue, int] = {}
    first: dict[_Residue, sympy.Expr] = {}
    for start, size in starts:
        key = _residue(start, vec)
        if key is not None:
            weight[key] = weight.get(key, 0) + size
            first.setdefault(key, start)
    if not weight:
        return None
    residue = max(weight, key=lambda k: weight[k])
    if not residue and int(rnumel) % VECTOR_BYTES == 0:
        return (None,)  # rows on a vector boundary, a mask bound Triton knows divisible by 16
    return (AlignedWalk(vec, first[residue], residue, rvar, int(rnumel), sizes),)
