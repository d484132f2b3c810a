"""The ops handler that emits a ``KernelSpec``'s Triton code (elementwise ops: ``_pointwise.py``;
constants, conversions, random: ``_conversions.py``; the function(s) around it: ``_assemble.py``).

The kernel flattens the x ranges into one ``xindex`` (a block of XBLOCK of them per program) and
recovers each x variable with ``//`` and ``%``; reductions flatten the r ranges into ``rindex``
likewise. Pointwise kernels use 1-D blocks ``[XBLOCK]``; reduction kernels 2-D ``[XBLOCK, RBLOCK]``
(x along dim 0, r along dim 1), or ``[RBLOCK, XBLOCK]`` for outer reductions whose memory is
contiguous along x (``_layout.py`` decides per kernel). A *split* reduction (``_split.py``) is
two functions: chunks of r into partials on a 2-D grid, then ``<name>_finish``. A *persistent* reduction holds a whole row (RBLOCK >= rnumel) and
runs every stage straight through; a *looped* one wraps each loop stage in
``for roffset in range(0, rnumel, RBLOCK)``, accumulating per lane and combining lanes after it
(or, for rows off a 16-byte boundary, in the three loops of the aligned walk: ``_aligned.py``).

Each stage's code goes into three lists: ``prefix`` (loop-invariant, before the r-loop), ``body``
(inside it) and ``suffix`` (after it: reduction results and what is computed from them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import sympy
import torch
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.indexing import index_symbol

from . import _eviction, _online, _reductions
from ._aligned import AlignedWalk, EdgeUnavailable
from ._compat import math_table
from ._conversions import ConversionOps
from ._flat_index import FlatIndex
from ._layout import DEFAULT, BlockLayout
from ._online import OnlinePair, OnlineUnavailable
from ._pointwise import PointwiseOps
from ._values import LOW_PRECISION as _LOW_PRECISION
from ._values import NONE, TritonValue
from .errors import CodegenError
from .options import TritonOptions
from .printer import texpr, tl_dtype

#: the parameter of a kernel that checks its data (under the interpreter): a one-element int32
#: tensor, zeroed for each call, into which the kernel ORs the bits below (see wrapper.py)
STATUS_PARAM = "tk_status"
STATUS_INDEX_OUT_OF_BOUNDS = 1
STATUS_ZERO_DIVISION = 2


@dataclass
class _Stage:
    prefix: list[str] = field(default_factory=list)
    body: list[str] = field(default_factory=list)
    suffix: list[str] = field(default_factory=list)
    looped: bool = False
    # an r-loop whose only reduction an earlier stage computed online (_online.py): its loop's
    # lines are dropped, its prefix and suffix kept
    absorbed: bool = False
    # accumulators' initial values (before the r-loop), and for a split reduction the lines that
    # store the partials (after the loop, first kernel) and combine them (second kernel)
    init: list[str] = field(default_factory=list)
    partial_out: list[str] = field(default_factory=list)
    partial_in: list[str] = field(default_factory=list)


class TritonOpsHandler(PointwiseOps, ConversionOps):
    """The loop-IR ops handler that writes Triton code for one kernel (CSE'd ``tmpN = ...`` lines)."""

    def __init__(
        self,
        spec: KernelSpec,
        arg_names: dict[str, str],
        *,
        reduction: bool,
        looped: bool,
        options: TritonOptions,
        interpret: bool,
        layout: BlockLayout = DEFAULT,
    ) -> None:
        self.spec = spec
        self.layout = layout
        self.flat_index = FlatIndex(spec.xranges, spec.rranges)  # addresses without // and %
        self.arg_names = arg_names
        self.reduction_kernel = reduction
        self.looped = looped
        self.options = options
        self.math = math_table(interpret)
        self.interpret = interpret
        self.stages: list[_Stage] = []
        self.stage_index = -1
        self._cse: dict[str, tuple[TritonValue, str]] = {}
        self._loads: dict[tuple[str, sympy.Expr], TritonValue] = {}
        self._stored: dict[tuple[str, sympy.Expr], tuple[TritonValue, str]] = {}
        self._sym: dict[sympy.Symbol, tuple[frozenset[str], int | None]] = {}
        self._masks: list[TritonValue] = []
        #: a load's value -> the masks it was loaded under (it is 0 wherever one of them is off)
        self._masked_loads: dict[str, tuple[str, ...]] = {}
        #: values rounded to 16 bits here: widened again through ``_tk_rounded`` on a GPU
        self.rounded: set[str] = set()
        #: widened 16-bit values: narrowing one back is the value itself (``narrowed``)
        self.widened: dict[str, TritonValue] = {}
        self._counter = 0
        self._indirect = 0
        self._busy: set[str] = set()
        # (stage, type, value) -> result: the buffers of one multi-output reduction (welford's
        # mean and m2) call ops.reduction on the same value; fused, they share one pass
        self._reductions: dict[tuple[int, str, str | tuple[str, ...]], Any] = {}
        self.xvars: list[sympy.Expr] = []
        self.rvars: list[sympy.Expr] = []
        self.reports_status = False  # something is checked: the kernel takes tk_status
        self.split = False  # a split reduction (_split.py): reductions store partials
        self.partials: list[torch.dtype] = []  # their dtypes, in parameter order
        self.online: OnlinePair | None = None  # a max and sum of exp to compute in one loop
        self._online_sum: TritonValue | None = None
        # a persistent softmax's sum of exp(x - max(x)), traced by name through its ops
        # (``is_sum_of_exp``): row max -> the value it is the max of; then each value that is
        # a step of the chain -> the step ("shifted": x - max, "exp", "sum": its row sum)
        self._max_of: dict[str, str] = {}
        self._softmax_step: dict[str, str] = {}
        self._calls: dict[int, int] = {}  # ops.reduction calls per stage, as _online counts
        self.aligned: AlignedWalk | None = None  # rows walked from a 16-byte boundary (_aligned)
        # a whole walked row whose edge lanes are stored from a block of their own after its
        # stages (_aligned.AlignedWalk.edge_lines): the nodes that stored walked outputs, run
        # again there (``begin_edges``); ``edge_mode`` while they run
        self.edges = False
        self.edge_mode = False
        self.current_node: Any = None
        self.edge_nodes: list[Any] = []
        #: buffers read by more than one r-loop -> the last such loop's stage (_eviction.py)
        self.rereads: dict[str, int] = {}
        # a mixed-order kernel (``KernelSpec.row_programs``): the stages run inside a loop over
        # the program's rows; what depends on no row is computed once before it
        # (``before_rows``), the partials of its ``across_rows`` nodes after it (``after_rows``)
        self.row_loop = False
        self.across = False  # the node being emitted reduces across the program's rows
        self.before_rows: list[str] = []
        self.after_rows: list[str] = []
        self._across_results: set[str] = set()
        # a matmul template's epilogue (``_template.py``): loads of the product's names are
        # its tile (``product``), x-dependent values are 2-D blocks of ``block_shape``
        self.product_names: frozenset[str] = frozenset()
        self.product: TritonValue | None = None
        self.block_shape = ""

    # -- structure -----------------------------------------------------------------------
    def declare_symbol(self, sym: sympy.Symbol, deps: frozenset[str]) -> None:
        self._sym[sym] = (deps, None)

    def begin_stage(self, looped: bool) -> None:
        self.stage_index += 1
        absorbed = self.online is not None and self.stage_index == self.online.stage + 1
        self.stages.append(_Stage(looped=looped, absorbed=absorbed and looped))

    def end_stage(self) -> None:
        # values computed inside an r-loop are out of scope after it
        self._cse = {k: v for k, v in self._cse.items() if v[1] != "body"}
        self._loads = {k: v for k, v in self._loads.items() if self._cse.get(v.name)}
        self._stored = {k: v for k, v in self._stored.items() if v[1] != "body"}

    def begin_edges(self, walk: AlignedWalk, rlines: Sequence[str]) -> None:
        """A last stage over a whole walked row's edge lanes: the block names rebound to
        ``walk.edge_lines()`` and the r variables to its ``rindex``; values that vary along r
        forgotten (the nodes run again recompute them there), those of x only kept (the
        reductions' results)."""
        self.begin_stage(False)
        self.edge_mode = True
        self._cse = {k: v for k, v in self._cse.items() if "r" not in v[0].deps}
        self._loads = {k: v for k, v in self._loads.items() if "r" not in v.deps}
        self._stored = {
            k: v
            for k, v in self._stored.items()
            if not (isinstance(v[0], TritonValue) and "r" in v[0].deps)
        }
        self.layout = replace(self.layout, rblock=str(walk.edge_lanes))
        for ln in [*walk.edge_lines(), *rlines]:
            self.line(ln, "prefix")

    @property
    def _stage(self) -> _Stage:
        return self.stages[-1]

    def new_name(self, prefix: str = "tmp") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def location(self, deps: frozenset[str], post: int | None) -> str:
        if post is not None and post == self.stage_index:
            return "suffix"
        if "r" in deps and self._stage.looped:
            return "body"
        if self.row_loop and "x" not in deps and post is None:
            return "before_rows"  # the same for every row of a mixed-order kernel's program
        return "prefix"

    def line(self, text: str, loc: str) -> None:
        if loc == "before_rows":
            self.before_rows.append(text)
        else:
            getattr(self._stage, loc).append(text)

    def emit(
        self,
        expr: str,
        dtype: torch.dtype,
        deps: frozenset[str],
        post: int | None = None,
        *,
        cse: bool = True,
    ) -> TritonValue:
        """``tmpN = expr`` in the right list, reusing an earlier identical expression."""
        if post is not None and post != self.stage_index:
            post = None
        if cse and expr in self._cse:
            return self._cse[expr][0]
        loc = self.location(deps, post)
        value = TritonValue(self.new_name(), dtype, deps, post)
        self.line(f"{value.name} = {expr}", loc)
        if cse:
            self._cse[expr] = (value, loc)
            self._cse[value.name] = (value, loc)
        return value

    @staticmethod
    def join(*values: Any) -> tuple[frozenset[str], int | None]:
        deps: frozenset[str] = NONE
        post = None
        for v in values:
            if isinstance(v, TritonValue):
                deps = deps | v.deps
                if v.post is not None:
                    post = v.post if post is None else max(post, v.post)
        return deps, post

    def shape(self, deps: frozenset[str]) -> str:
        if self.block_shape:
            return self.block_shape if deps else "[1]"
        if not self.reduction_kernel:
            return "[XBLOCK]" if deps else "[1]"
        lay = self.layout
        return {
            frozenset(): "[1, 1]",
            frozenset({"x"}): lay.x_shape,
            frozenset({"r"}): lay.r_shape,
        }.get(deps, lay.block)

    # -- indices ---------------------------------------------------------------------------
    def index_info(self, index: sympy.Expr) -> tuple[frozenset[str], int | None]:
        deps: frozenset[str] = NONE
        post = None
        for sym in sympy.sympify(index).free_symbols:
            d, p = self._sym.get(sym, (NONE, None))
            deps = deps | d
            if p is not None:
                post = p
        return deps, post

    def _mask_text(self, deps: frozenset[str], rmask: str = "rmask") -> str | None:
        parts = [m for m, d in (("xmask", "x"), (rmask, "r")) if d in deps]
        parts += [m.name for m in self._masks]
        return " & ".join(parts) if parts else None

    def _pointer(self, name: str, index: sympy.Expr, deps: frozenset[str]) -> tuple[str, bool]:
        """The address of ``name[index]`` (broadcast to ``deps``' shape), and whether it is
        the aligned walk's (``_aligned.AlignedWalk.pointer``: its loads take ``rload``)."""
        idx_deps, _ = self.index_info(index)
        ptr = None
        if self.aligned is not None and "r" in idx_deps and (self._stage.looped or not self.looped):
            ptr = self.aligned.pointer(self.arg_names[name], index, self.flat_index)
        walked = ptr is not None
        if ptr is None:
            ptr = f"{self.arg_names[name]} + ({texpr(self.flat_index.rewrite(index))})"
        if idx_deps != deps:  # broadcast the pointer to the shape of its mask/value
            ptr += f" + tl.zeros({self.shape(deps)}, tl.int32)"
        return ptr, walked

    def _recompute(self, name: str) -> bool:
        """Re-run the pointwise body that computes local buffer ``name`` in the current scope
        (its earlier value lived inside another stage's r-loop)."""
        for stage in self.spec.stages:
            for node in stage.nodes:
                if node.buffer == name and not node.is_reduction and name not in self._busy:
                    self._busy.add(name)
                    try:
                        node.body(list(self.xvars), list(self.rvars))
                    finally:
                        self._busy.discard(name)
                    return True
        return False

    # -- memory ----------------------------------------------------------------------------
    def load(self, name: str, index: sympy.Expr) -> TritonValue:
        if name in self.product_names and self.product is not None:
            return self.product  # loop-ir loads it at the flat index only (matmul_templates.py)
        key = (name, sympy.sympify(index))  # the expression, not its text: printing cost more
        if key in self._stored:
            return self._stored[key][0]
        if name in self.spec.local_buffers and self._recompute(name) and key in self._stored:
            return self._stored[key][0]
        if name in self.spec.local_buffers or name not in self.arg_names:
            raise CodegenError(
                f"kernel {self.spec.name}: load of {name!r} at {index} has no earlier store in this "
                "kernel scope and the buffer is not a kernel argument"
            )
        deps, post = self.index_info(index)
        mask_vals = self._masks
        deps, post = self.join(TritonValue("", torch.bool, deps, post), *mask_vals)
        if key in self._loads and not mask_vals:
            return self._loads[key]
        buf = self.spec.buffers[name]
        ptr, walked = self._pointer(name, index, deps)
        mask = self._mask_text(deps, "rload" if walked else "rmask")
        if not deps:
            # a [1] block like every constant: a 0-d load mixed with [1] blocks in a bool op
            # fails in Triton's interpreter (numpy cannot OR a 0-d and a 1-d int1)
            ptr = f"{ptr} + tl.zeros([1], tl.int32)"
        text = f"tl.load({ptr}, {mask}, other=0)" if mask else f"tl.load({ptr})"
        evict = (
            _eviction.policy(self.rereads, name, self.stage_index) if self._stage.looped else None
        )
        if evict is not None:
            text = f'{text[:-1]}, eviction_policy="{evict}")'
        dtype = buf.dtype
        if dtype in _LOW_PRECISION:  # computed in float32, like eager's kernels do internally
            # the interpreter's bfloat16 -> float32 conversion flushes subnormals: widen the bits
            bf16 = dtype == torch.bfloat16 and self.interpret
            text = f"_tk_bf16_to_f32({text})" if bf16 else text + ".to(tl.float32)"
            dtype = torch.float32
        value = self.emit(text, dtype, deps, post)
        if not mask_vals:
            self._loads[key] = value
        else:
            self._masked_loads[value.name] = tuple(m.name for m in mask_vals)
        return value

    def _store_common(self, name: str, index: sympy.Expr, value: Any, mode: str | None) -> None:
        value = self.as_value(value, self.spec.buffers[name].dtype)
        key = (name, sympy.sympify(index))  # the expression, not its text: printing cost more
        idx_deps, idx_post = self.index_info(index)
        base = frozenset({"x"})  # a store happens once per x index: mask by xmask even for ()
        deps, post = self.join(
            TritonValue("", torch.bool, idx_deps | base, idx_post), value, *self._masks
        )
        if post is not None and post != self.stage_index:
            post = None
        loc = self.location(deps, post)
        self._stored[key] = (value, loc)
        self._loads = {k: v for k, v in self._loads.items() if k[0] != name}
        if name in self.spec.local_buffers:
            return
        if name not in self.arg_names:
            raise CodegenError(
                f"kernel {self.spec.name}: store to {name!r}, which is neither an "
                "output nor a local buffer"
            )
        dtype = self.spec.buffers[name].dtype
        val = self.narrowed(value, dtype)
        ptr, walked = self._pointer(name, index, deps)
        mask = self._mask_text(deps)
        evict = _eviction.store_policy(
            self.rereads,
            self.stage_index,
            self._stage.looped and "r" in deps and self.options.reread_stores_evict_first,
        )
        hint = f', eviction_policy="{evict}"' if evict else ""
        if mode == "atomic_add":
            self.line(f"tl.atomic_add({ptr}, {val}, {mask or 'None'})", loc)
        elif self.edge_mode:
            if mode is not None:
                raise EdgeUnavailable(f"a {mode} store")
            if walked and "r" in deps:  # the edge lanes (everything else was stored before)
                self.line(f"tl.store({ptr}, {val}, {self._mask_text(deps, 'redge')})", loc)
        elif mode is None and walked and "r" in deps:
            # the walk's store: the row's lanes (rmask) as whole vectors, then the few lanes at
            # the row's ends one at a time (_aligned.AlignedWalk.store_masks), from a block of
            # their own for a whole row with edges (begin_edges)
            parts = ("rstore",) if self.edges else ("rstore", "redge")
            for part in parts:
                self.line(f"tl.store({ptr}, {val}, {self._mask_text(deps, part)}{hint})", loc)
            if self.edges and not any(n is self.current_node for n in self.edge_nodes):
                self.edge_nodes.append(self.current_node)
        elif mode is None:
            masked = f", {mask}" if mask else ""
            self.line(f"tl.store({ptr}, {val}{masked}{hint})", loc)
        else:
            raise CodegenError(f"store mode {mode!r} is not supported by the Triton backend")

    def store(self, name: str, index: sympy.Expr, value: Any, mode: str | None = None) -> None:
        self._store_common(name, index, value, mode)

    def store_reduction(self, name: str, index: sympy.Expr, value: Any) -> None:
        if self.edge_mode:
            raise EdgeUnavailable("a node run again over the edge lanes stores a reduction")
        if isinstance(value, tuple):
            raise CodegenError("store_reduction got a tuple (a welford result): store its parts")
        if isinstance(value, TritonValue) and value.name in self._across_results:
            # a partial of the program's rows, one value a column: stored after the row loop
            if self.spec.buffers[name].dtype != value.dtype:
                raise CodegenError(
                    f"kernel {self.spec.name}: a partial across rows stored as another dtype"
                )
            ptr = f"{self.arg_names[name]} + ({texpr(self.flat_index.rewrite(index))})"
            self.after_rows.append(f"tl.store({ptr}, {value.name}, rmask)")
            return
        self._store_common(name, index, value, None)

    def _across_rows(self, dtype: torch.dtype, reduction_type: str, value: Any) -> TritonValue:
        """The sum of ``value`` over the rows of a mixed-order kernel's program, one value a
        column: a ``[XBLOCK, RBLOCK]`` accumulator added to in each iteration of the row loop,
        its lanes summed after it (a ``[1, RBLOCK]`` value only ``store_reduction`` may use)."""
        if reduction_type != "sum" or not self.row_loop:
            raise CodegenError(
                f"kernel {self.spec.name}: {reduction_type} across rows (only sums, in a "
                "mixed-order kernel)"
            )
        v = self.as_value(value, dtype)
        key = (self.stage_index, "across", v.name)
        if key not in self._reductions:
            acc, out = self.new_name("_acc"), self.new_name()
            text = v.name if v.dtype == dtype else f"{v.name}.to({tl_dtype(dtype)})"
            block = _reductions.broadcast(text, v, self.layout)
            mask = self._mask_text(frozenset({"x", "r"}))
            self.before_rows.append(f"{acc} = tl.zeros({self.layout.block}, {tl_dtype(dtype)})")
            self.line(f"{acc} = {acc} + tl.where({mask}, {block}, 0)", "prefix")
            self.after_rows.append(f"{out} = tl.sum({acc}, 0)[None, :]")
            self._across_results.add(out)
            self._reductions[key] = TritonValue(out, dtype, frozenset({"r"}), None)
        return self._reductions[key]

    def is_sum_of_exp(self, v: TritonValue) -> bool:
        """Whether ``v`` is a softmax's sum of exp(x - max) over its row, at least 1 (the max's
        own term) or NaN (``PointwiseOps.truediv`` multiplies by its reciprocal): the online
        softmax's (``_online.emit_online``), or a sum a kernel computes from the same value
        ``x`` as its max (a persistent kernel holds both in one block: one name)."""
        if self._online_sum is not None and v.name == self._online_sum.name:
            return True
        return self._softmax_step.get(v.name) == "sum"

    def sub(self, a: Any, b: Any) -> TritonValue:
        out = PointwiseOps.sub(self, a, b)
        if isinstance(a, TritonValue) and isinstance(b, TritonValue):
            if self._max_of.get(b.name) == a.name:
                self._softmax_step[out.name] = "shifted"
        return out

    def erf(self, a: Any) -> TritonValue:
        if self.options.erf_two_ranges:
            (v,) = self._args((a,))
            if v.dtype == torch.float32:
                return self._op("_tk_erf_two_ranges({0})", v)
        return PointwiseOps.erf(self, a)  # type: ignore[attr-defined]

    def exp(self, a: Any) -> TritonValue:
        out = PointwiseOps.exp(self, a)  # type: ignore[attr-defined]
        if isinstance(a, TritonValue) and self._softmax_step.get(a.name) == "shifted":
            self._softmax_step[out.name] = "exp"
        return out

    def reduction(
        self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value: Any
    ) -> Any:
        if not self.reduction_kernel:
            raise CodegenError(
                f"kernel {self.spec.name}: ops.reduction in a kernel without rranges"
            )
        if self.edge_mode:
            raise EdgeUnavailable("a node run again over the edge lanes reduces")
        if self.across:
            return self._across_rows(dtype, reduction_type, value)
        call = self._calls.get(self.stage_index, 0)
        self._calls[self.stage_index] = call + 1
        if self._stage.absorbed:  # its sum of exp(x - max) came from the online loop
            if self._online_sum is None or reduction_type != "sum":
                raise OnlineUnavailable(f"stage {self.stage_index}: no online sum")
            return self._online_sum
        if reduction_type == "welford_combine":
            parts = tuple(self.as_value(v, torch.float32) for v in value)
            key = (self.stage_index, reduction_type, tuple(p.name for p in parts))
            if key not in self._reductions:
                self._reductions[key] = _reductions.welford_combine(self, parts, self._stage.looped)
            return self._reductions[key]
        value = self.as_value(value, src_dtype)
        key = (self.stage_index, reduction_type, value.name)
        online = self.online
        if online and (self.stage_index, call) == (online.stage, online.max_call):
            if key in self._reductions or not self._stage.looped:
                raise OnlineUnavailable("the max was already emitted as a plain reduction")
            top, self._online_sum = _online.emit_online(self, dtype, value)
            self._reductions[key] = top
        if key not in self._reductions:
            self._reductions[key] = _reductions.emit_reduction(
                self, dtype, src_dtype, reduction_type, value
            )
        out = self._reductions[key]
        if isinstance(out, TritonValue) and not self.split and not self.row_loop:
            if reduction_type == "max" and value.dtype == out.dtype:
                self._max_of[out.name] = value.name
            elif reduction_type == "sum" and self._softmax_step.get(value.name) == "exp":
                self._softmax_step[out.name] = "sum"
        return out

    def index_expr(self, expr: sympy.Expr, dtype: torch.dtype) -> TritonValue:
        expr = sympy.sympify(expr)
        deps, post = self.index_info(expr)
        if not deps:
            if expr.is_Integer:
                return self.constant(int(expr), dtype)
            # a size symbol is a scalar argument (or a constexpr when Triton specialized it to 1)
            return self.emit(
                f"(tl.zeros([1], tl.int64) + ({texpr(expr)})).to({tl_dtype(dtype)})",
                dtype,
                deps,
                post,
            )
        return self.emit(f"({texpr(expr)}).to({tl_dtype(dtype)})", dtype, deps, post)

    def indirect_indexing(self, value: Any, size: sympy.Expr, check: bool = True) -> sympy.Symbol:
        value = self.as_value(value, torch.int64)
        sym = index_symbol("i", self._indirect)
        self._indirect += 1
        loc = self.location(value.deps, value.post)
        self.line(f"{sym.name} = {value.name}", loc)
        self._sym[sym] = (value.deps, value.post if value.post == self.stage_index else None)
        if check and self.interpret:
            # under the interpreter (Triton on a CPU) a bad index is reported like the C++
            # kernels do: a status word the launcher checks after the call, and index 0 read
            # instead. On a GPU that check would cost a device sync per call (and break CUDA
            # graph capture): GPU kernels check only with debug_asserts.
            ok = f"(0 <= {value.name}) & ({value.name} < {texpr(size)})"
            self._report(f"~({ok})", value, STATUS_INDEX_OUT_OF_BOUNDS)
            self.line(f"{sym.name} = tl.where({ok}, {value.name}, 0)", loc)
        elif check and self.options.debug_asserts:
            at, mask = self._checked_under(value)
            ok = f"(0 <= {sym.name}) & ({sym.name} < {texpr(size)})"
            cond = f"({ok}) | ~({mask})" if mask else ok
            self.line(
                f'tl.device_assert({cond}, "index out of bounds: 0 <= {sym.name} < {texpr(size)}")',
                at,
            )
        return sym

    def _checked_under(self, value: TritonValue) -> tuple[str, str | None]:
        """Where a check of ``value`` goes, and the mask it is checked under (the lanes of
        ``value``'s shape and the current ``masked`` conditions): where both the value and the
        masks are defined. A divisor the same for a whole row (hoisted before the r-loop)
        checked under a mask that varies along r (a ``where`` over a slice's backward) is
        checked inside the loop: fuzz seed 54522's check read the mask before the loop defined
        it."""
        deps, post = value.deps, value.post
        for m in self._masks:
            deps = deps | m.deps
            if m.post is not None and m.post == self.stage_index:
                post = m.post
        return self.location(deps, post), self._mask_text(deps)

    def _report(self, bad: str, value: TritonValue, bit: int) -> None:
        """Set ``bit`` of the call's status word in the lanes (of ``value``'s shape, under the
        current masks) where ``bad`` holds (``_checked_under``)."""
        loc, mask = self._checked_under(value)
        name = self.new_name("bad")
        self.line(f"{name} = ({bad})" + (f" & ({mask})" if mask else ""), loc)
        self.line(f"tl.atomic_or({STATUS_PARAM} + {name}.to(tl.int32) * 0, {bit}, {name})", loc)
        self.reports_status = True

    def report_zero_divisor(self, divisor: TritonValue) -> None:
        """An integer division by ``divisor``: eager's CPU kernels raise ZeroDivisionError for a
        0 (checked under the interpreter only, as indices are; CUDA's eager does not check)."""
        if self.interpret:
            self._report(f"{divisor.name} == 0", divisor, STATUS_ZERO_DIVISION)

    def masked(self, mask: Any, body: Any, other: Any) -> Any:
        mask = self.as_value(mask, torch.bool)
        self._masks.append(mask)
        try:
            result = body()
        finally:
            self._masks.pop()
        if result is None:
            return None
        result = self.as_value(result, torch.float32)
        if mask.name in self._masked_loads.get(result.name, ()) and _positive_zero(other):
            # a load under this mask (other=0), widened or not: already 0 where the mask is off,
            # so no select (one instruction per element saved: a direct convolution has a
            # masked load per tap)
            return result
        deps, post = self.join(mask, result)
        other_v = self.as_value(other, result.dtype)
        return self.emit(
            f"tl.where({mask.name}, {result.name}, {other_v.name})", result.dtype, deps, post
        )


def _positive_zero(value: Any) -> bool:
    """``value`` is a Python 0, 0.0 (not -0.0) or False: what a masked load gives (``other=0``)."""
    if isinstance(value, int):  # bool too
        return value == 0
    return isinstance(value, float) and value == 0 and math.copysign(1.0, value) > 0
