"""Split reductions: many programs reduce chunks of r into partials, a second kernel finishes.

A reduction kernel runs one program per block of x. When x is short and r long (the bias
gradient of a ``[8192, 3072]`` activation: 3072 columns, 8192 rows) that is a few dozen programs
on a GPU of 132 SMs, each looping over every row: most of the GPU idles. Split, the kernel runs
on a 2-D grid (x blocks, r chunks): program (i, c) reduces rows ``[c * rchunk, (c + 1) * rchunk)``
of its x block into ``partial[c, x]`` (and still writes every pointwise output of those rows);
a second kernel, ``<name>_finish``, combines the chunks of each x (a short reduction over the
first axis of the partials) and runs what follows the reduction (casts, stores, epilogues).

Only what combining partials gets right: a kernel of one r-loop stage (then epilogues only),
whose reductions are sum, prod, max, min or xor_sum (associative; a float sum is re-associated,
as any blocked reduction is). Welford and argmax/argmin need (value, index) or (mean, m2,
weight) partials and stay unsplit, as do kernels with several loop stages.
"""

from __future__ import annotations

from typing import Any

from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.handlers import NoOpHandler
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.ops import set_ops_handler

#: reductions combined exactly (up to float re-association) from per-chunk partials
SPLITTABLE = frozenset({"sum", "prod", "max", "min", "xor_sum"})

#: the extra parameters: the chunk (in rows, a multiple of RBLOCK) each program of the first
#: kernel reduces, and the number of chunks the finishing kernel combines
RCHUNK_PARAM = "rchunk"
NCHUNKS_PARAM = "nchunks"


def partial_name(i: int) -> str:
    return f"part_ptr{i}"


class _ReductionRecorder(NoOpHandler):
    def __init__(self) -> None:
        super().__init__()
        self.types: list[str] = []

    def reduction(self, dtype: Any, src_dtype: Any, reduction_type: str, value: Any) -> Any:
        self.types.append(reduction_type)
        return super().reduction(dtype, src_dtype, reduction_type, value)


def reduction_types(spec: KernelSpec) -> frozenset[str] | None:
    """The reduction types of ``spec``'s first stage (None: its bodies could not be replayed)."""
    if not spec.stages:
        return frozenset()
    recorder = _ReductionRecorder()
    xvars = [index_symbol("x", i) for i in range(len(spec.xranges))]
    rvars = [index_symbol("r", i) for i in range(len(spec.rranges))]
    try:
        with set_ops_handler(recorder):
            for node in spec.stages[0].nodes:
                node.body(list(xvars), list(rvars))
    except Exception:  # noqa: BLE001 - an analysis only: the code generator reports real errors
        return None
    return frozenset(recorder.types)


def splittable(spec: KernelSpec) -> bool:
    """Whether ``spec`` can run as a split reduction (see the module docstring)."""
    kinds = [s.kind for s in spec.stages]
    if not kinds or kinds[0] != "loop" or any(k != "epilogue" for k in kinds[1:]):
        return False
    types = reduction_types(spec)
    return bool(types) and all(t in SPLITTABLE for t in types)


def chunking(rnumel: int, split: int, rblock: int) -> tuple[int, int]:
    """(rows per chunk, chunks) for at most ``split`` chunks of a whole number of RBLOCKs."""
    per = -(-rnumel // split)
    rchunk = -(-per // rblock) * rblock
    return rchunk, -(-rnumel // rchunk)


def finish_blocks(split: int, xnumel: int) -> tuple[int, int]:
    """(XBLOCK, RBLOCK) of the finishing kernel: every chunk in one block (RBLOCK >= split),
    a tile of at most 4096 partials."""
    rblock = 1 << max(0, (split - 1).bit_length())
    xcap = 1 << max(0, (xnumel - 1).bit_length())
    return max(1, min(64, 4096 // rblock, xcap)), rblock


def split_functions(
    name: str,
    params: list[str],
    head: list[str],
    rlines: list[str],
    stages: list[Any],
    r_loop: str,
) -> str:
    """The two functions of a split reduction from the generated stages (kernel.py's
    ``_Stage``s; the first is the looped reduction stage, the rest epilogues). ``params``: the
    tensors, partials, status word and sizes, then ``xnumel``; ``head``: the x lines."""
    first, rest = stages[0], stages[1:]
    consts = ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    part = [
        f"def {name}({', '.join([*params, 'rnumel', RCHUNK_PARAM, *consts])}):",
        "    # split reduction: this program reduces rows [rstart, rstart + rchunk) of its x "
        "block into partials, the finishing kernel combines them",
        *head,
        f"    rstart = tl.program_id(1) * {RCHUNK_PARAM}",
        *("    " + ln for ln in first.init + first.prefix),
        f"    for roffset in {r_loop}:",
        "        rindex = rstart + roffset + rbase",
        "        rmask = rindex < rnumel",
        *("        " + ln for ln in rlines + first.body),
        *("    " + ln for ln in first.partial_out),
    ]
    finish = [
        f"def {name}_finish({', '.join([*params, NCHUNKS_PARAM, *consts])}):",
        "    # split reduction, second kernel: r indexes the chunks of the partials",
        *head,
        "    rindex = rbase",
        f"    rmask = rindex < {NCHUNKS_PARAM}",
        # the loop-invariant values again, not the stores, atomics or checks before the
        # loop (statements, ``tl.*(...)``): the first kernel made those
        *("    " + ln for ln in first.prefix if not ln.startswith("tl.")),
        *("    " + ln for ln in first.partial_in + first.suffix),
    ]
    for st in rest:
        finish += ["    " + ln for ln in st.init + st.prefix + st.body + st.suffix]
    return "\n".join(part) + "\n\n\n@triton.jit\n" + "\n".join(finish) + "\n"
