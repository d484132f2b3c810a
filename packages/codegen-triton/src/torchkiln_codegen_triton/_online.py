"""Online softmax: a row's max and its sum of ``exp(x - max)`` in one r-loop of a looped kernel.

A softmax (log_softmax, cross-entropy) reduction kernel is three stages: the row's
max, the sum of ``exp(x - max)`` over the row, then the outputs. Persistent (the row in
registers) that reads the row from memory once; looped (rows longer than
``TritonOptions.persistent_rnumel``: a language model's vocabulary of 30522-50257) each stage
is an r-loop that reads the row again, three reads. The *online* form (Milakov and
Gimelshein, "Online normalizer calculation for softmax", 2018) keeps, per group of a few
consecutive values of the block (``_grouped``; per lane with ``online_group=1``, ``_per_lane``),
a running max ``m`` and a running sum ``s`` of ``exp(x - m)``, rescaling ``s`` by
``exp(m_old - m_new)`` when a block raises the max; after the loop the groups combine as
``M = max(m)``, ``S = sum(s * exp(m - M))``. The sum's own loop is then dropped: two reads.

The decision (``online_plan``), made per kernel from its stages:

- it applies to a *looped* kernel (``TritonOptions.online_softmax`` on, not a split
  reduction) whose loop stage ``i`` has a floating ``max`` reduction of a value ``v`` and whose
  next stage ``i + 1`` is a loop stage computing one reduction (the same one twice, a fused
  softmax's and log_softmax's, is one), a ``sum`` of ``exp(v - max)`` with the same ``v`` (the
  same loads at the same indices through the same ops), storing nothing to memory but that sum. Stage ``i + 1`` is then *absorbed*: its sum is
  computed by stage ``i``'s loop, and its own loop is not emitted.
- not for persistent kernels (the row is read once already; the online form would only add an
  exp per element), nor where stage ``i + 1`` writes anything else per element, reduces
  anything else, or computes its sum from another value (a softmax's backward, ``sum(g * y)``,
  is one pass already; ``torch.logsumexp`` subtracts a max with its infinities replaced by 0,
  which the online lanes cannot reproduce for rows of infinities).

NaN and infinities: the online lanes are exact only for rows whose max ``M`` is finite (every
value finite or -inf). Where ``M`` is not finite eager's sum of ``exp(x - M)`` holds a NaN (an
all -inf row gives ``-inf - -inf``, a +inf gives ``inf - inf``, a NaN propagates), so ``S`` is
NaN there, as eager's; the consumers then compute what eager does from ``M`` and ``S``. A lane
of only -inf so far sums ``exp(x - 0) = 0`` (its base is 0, not -inf: no ``-inf - -inf``), and
its weight ``exp(-inf - M)`` in the combine is 0. 16-bit inputs are widened to float32 by the
loads, so the running max and sum are float32 (float64 for float64 rows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torchkiln_loop_ir.backend import KernelSpec
from torchkiln_loop_ir.handlers import DefaultHandler
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.ops import ALL_OPS, set_ops_handler

from ._values import XR, TritonValue, full
from .autotune import widest_input_itemsize
from .printer import tl_dtype

#: log2(e): exp(x) = exp2(x * LOG2E)
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class OnlinePair:
    """Stage ``stage``'s reduction call number ``max_call`` (a max) also computes the sum of
    exp(value - max) that stage ``stage + 1`` (absorbed: no r-loop) reduces."""

    stage: int
    max_call: int

    @property
    def note(self) -> str:
        """The kernel's comment recording the decision (tests look for "online softmax")."""
        return (
            f"online softmax: stage {self.stage}'s max and stage {self.stage + 1}'s sum of "
            "exp(x - max) in one r-loop (one read of the row fewer)"
        )


class OnlineUnavailable(Exception):
    """The generated kernel could not take the planned online form (the max was already
    emitted plainly, or the absorbed loop computed something used after it): the caller
    generates the kernel again without it."""


@dataclass
class _Reduction:
    stage: int
    call: int
    rtype: str
    value: Any
    dtype: Any


class _Tracer(DefaultHandler):
    """Runs kernel bodies and builds each value as a hashable expression tree: loads are
    ``("load", name, index)`` (a load of something this kernel stored is the stored tree),
    reduction results ``("red", stage, call)``, every other op ``(name, *args)``."""

    default_ops = ALL_OPS

    def __init__(self) -> None:
        self.stage = -1
        self.reductions: list[_Reduction] = []
        self.calls: dict[int, int] = {}
        self.results: dict[tuple[Any, ...], Any] = {}
        self.stored: dict[tuple[str, sympy.Expr], Any] = {}
        self.memory_stores: dict[int, list[tuple[str, Any]]] = {}  # per stage: stores to memory
        self.indirect: set[int] = set()  # stages with indirect indexing
        self.local: frozenset[str] = frozenset()

    def default(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return (name, *map(_frozen, args), *sorted((k, _frozen(v)) for k, v in kwargs.items()))

    def load(self, name: str, index: Any) -> Any:
        key = (name, sympy.sympify(index))
        return self.stored.get(key, ("load", name, key[1]))

    def _store(self, name: str, index: Any, value: Any) -> None:
        self.stored[(name, sympy.sympify(index))] = value
        if name not in self.local:
            self.memory_stores.setdefault(self.stage, []).append((name, value))

    def store(self, name: str, index: Any, value: Any, mode: str | None = None) -> None:
        self._store(name, index, value if mode is None else (mode, value))

    def store_reduction(self, name: str, index: Any, value: Any) -> None:
        self._store(name, index, value)

    def reduction(self, dtype: Any, src_dtype: Any, rtype: str, value: Any) -> Any:
        call = self.calls.get(self.stage, 0)
        self.calls[self.stage] = call + 1
        key = (self.stage, rtype, _frozen(value), dtype)
        if key in self.results:  # the same reduction again: the code generator emits it once
            return self.results[key]
        self.reductions.append(_Reduction(self.stage, call, rtype, _frozen(value), dtype))
        if rtype.startswith("welford"):
            result: Any = tuple(("red", self.stage, call, k) for k in range(3))
        else:
            result = ("red", self.stage, call)
        self.results[key] = result
        return result

    def masked(self, mask: Any, body: Any, other: Any) -> Any:
        return ("masked", mask, body(), _frozen(other))

    def indirect_indexing(self, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
        self.indirect.add(self.stage)
        return index_symbol("online_i", len(self.indirect))


def _frozen(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, float) and v != v:
        return ("nan",)  # NaN != NaN would make equal trees unequal
    return v


def online_plan(spec: KernelSpec, *, looped: bool, split: bool, enabled: bool) -> OnlinePair | None:
    """The max / sum-of-exp pair of ``spec`` to compute online (see the module docstring), or
    None. Only the first such pair: a kernel has one softmax's worth of row stages."""
    if not (enabled and looped and not split and spec.rranges):
        return None
    kinds = [s.kind for s in spec.stages]
    tracer = _Tracer()
    tracer.local = spec.local_buffers
    xvars = [index_symbol("x", i) for i in range(len(spec.xranges))]
    rvars = [index_symbol("r", i) for i in range(len(spec.rranges))]
    try:
        with set_ops_handler(tracer):
            for i, stage in enumerate(spec.stages):
                tracer.stage = i
                for node in stage.nodes:
                    node.body(list(xvars), list(rvars) if stage.kind == "loop" else [])
    except Exception:  # noqa: BLE001 - an analysis only: the code generator reports real errors
        return None
    by_stage: dict[int, list[_Reduction]] = {}
    for r in tracer.reductions:
        by_stage.setdefault(r.stage, []).append(r)
    for i in range(len(kinds) - 1):
        if kinds[i] != "loop" or kinds[i + 1] != "loop":
            continue
        nxt = by_stage.get(i + 1, [])
        if len(nxt) != 1 or nxt[0].rtype != "sum" or (i + 1) in tracer.indirect:
            continue
        total = ("red", i + 1, nxt[0].call)
        if any(v != total for _, v in tracer.memory_stores.get(i + 1, [])):
            continue  # stage i + 1 writes per-element values too: its loop stays
        for r in by_stage.get(i, []):
            if r.rtype != "max" or r.dtype != nxt[0].dtype or not r.dtype.is_floating_point:
                continue
            if nxt[0].value == ("exp", ("sub", r.value, ("red", i, r.call))):
                return OnlinePair(i, r.call)
    return None


def emit_online(h: Any, dtype: Any, value: TritonValue) -> tuple[TritonValue, TritonValue]:
    """(max, sum of exp(value - max)) of the row, from one r-loop in handler ``h``'s current
    stage (looped): a running max and a running sum of exp(value - max) per group of
    ``options.online_group`` values of the block (``_grouped``), or per value (``_per_lane``,
    a group of 1 or the transposed layout); then the groups combine as ``M = max(m)``,
    ``S = sum(s * exp(m - M))``."""
    from ._reductions import _lanes, broadcast  # the plain reductions' pieces

    lay, stage, x = h.layout, h.stage_index, frozenset({"x"})
    exp = h.math["exp"].format
    v = value.name if value.dtype == dtype else f"{value.name}.to({tl_dtype(dtype)})"
    vb = h.emit(broadcast(v, value, lay), dtype, XR).name
    # at most one thread's 16-byte vector of the row's widest input (8 bfloat16, 4 float32
    # values): a group wider than what a thread holds costs a layout conversion (float32
    # log_softmax over rows of 32768: 75% of the bandwidth with groups of 8, 92% reordered)
    group = min(h.options.online_group, max(1, 16 // widest_input_itemsize(h.spec)))
    if group > 1 and not lay.transposed:
        m, s = _grouped(h, dtype, vb, group)
    else:
        m, s = _per_lane(h, dtype, vb)
    top = h.emit(_lanes("max", m, dtype, lay, not h.interpret), dtype, x, stage, cse=False)
    lanes = lay.over_r("tl.sum", f"{s} * {exp(f'{m} - {top.name}')}")
    # eager's sum of exp(x - max) is NaN where the max is not finite (-inf - -inf, inf - inf)
    total = h.emit(
        f'tl.where(tl.abs({top.name}) < float("inf"), {lanes}, float("nan"))',
        dtype,
        x,
        stage,
        cse=False,
    )
    return top, total


def _exp_of(h: Any, dtype: Any, arg: str) -> str:
    """exp(``arg``) for an ``arg`` of at most 0: float32 takes ``tl.exp2`` (one
    ``ex2.approx.ftz``: a term below 2**-126 flushes to 0, which cannot move a sum of at least
    1, the lane's max's own term)."""
    if dtype == torch.float32:
        return f"tl.exp2(({arg}) * {LOG2E!r})"
    return h.math["exp"].format(arg)


def _per_lane(h: Any, dtype: Any, vb: str) -> tuple[str, str]:
    """Per lane: the running max ``m`` (NaN-propagating, as the max reduction) and sum ``s``
    of exp(value - m). One exp per value: with ``d = v - m``, ``exp(-|d|)`` is both the rescale
    of ``s`` when ``v`` raises the max (``s * exp(m - v) + 1``) and the new term when it does
    not (``s + exp(v - m)``): 12 instructions per value on sm_90
    (``benchmarks/triton_kernel_resources.py``), a loop bound by instructions, not memory
    (``benchmarks/gpu_softmax_probe.py``: 76-80% of the bandwidth of a plain row sum's 93%).

    A lane of only -inf so far has ``d = -inf - -inf``, NaN: the exponent ``max(NaN, -inf)``
    (a max that drops NaN) is -inf, so it adds 0 and its sum stays 0, whose weight
    ``exp(-inf - M)`` in the combine is 0. A NaN value adds 0 too, but raises the lanes' max to
    NaN, so the row's sum is NaN, as eager's (see the module docstring)."""
    from ._reductions import _combine

    lay = h.layout
    m, s = h.new_name("_online_max"), h.new_name("_online_sum")
    d, e = h.new_name("_online_d"), h.new_name("_online_e")
    h.line(f"{m} = {full(float('-inf'), dtype, lay.block)}", "prefix")
    h.line(f"{s} = {full(0.0, dtype, lay.block)}", "prefix")
    h.line(f"{d} = {vb} - {m}", "body")
    exponent = f'tl.maximum(-tl.abs({d}), float("-inf"))'
    h.line(f"{e} = {_exp_of(h, dtype, exponent)}", "body")
    h.line(f"{s} = tl.where(rmask, tl.where({d} > 0, {s} * {e} + 1.0, {s} + {e}), {s})", "body")
    h.line(f"{m} = tl.where(rmask, {_combine('max', m, vb, dtype)}, {m})", "body")
    return m, s


def _grouped(h: Any, dtype: Any, vb: str, group: int) -> tuple[str, str]:
    """Per group of ``group`` consecutive values of a row in the block (``tl.reshape`` to
    ``[XBLOCK, RBLOCK // group, group]``, order kept: with ``can_reorder=True`` Triton may
    regroup values across the block's *rows*, and on the H200 a program of 4 rows of 1025 then
    gave wrong sums, ``test_aligned_rows.py::test_several_rows_per_program``; the interpreter
    never reorders): the running max ``m`` and sum ``s`` of exp(value - m). Each block first
    takes its group max ``g`` (NaN-propagating), then ``m' = max(m, g)``,
    ``s' = s * exp(m - m') + sum(exp(v - m'))``: per value a
    subtraction, an exp and an add, the rescale once per group. On an H200, a row pass of this
    form reads at 88-91% of the bandwidth where the per-value form reads at 76-80% (a plain row
    sum: 93%; ``benchmarks/gpu_softmax_probe.py``).

    Masked lanes (the walk's first and last blocks) are -inf, which add exp(-inf) = 0 and
    leave the max. Infinities: the exponent base ``b`` is ``m'`` with -inf replaced by 0, so a
    group of only -inf so far adds 0 (no ``-inf - -inf``) and its rescale ``exp(-inf - b)`` is
    0; a +inf makes ``inf - inf``, NaN, in its group's sum, and the row's max +inf, where
    eager's sum is NaN as well. A NaN raises the group's max to NaN, so the row's max and sum
    are NaN, as eager's."""
    from ._reductions import _combine

    m, s = h.new_name("_online_max"), h.new_name("_online_sum")
    v, g, b = h.new_name("_online_v"), h.new_name("_online_g"), h.new_name("_online_b")
    shape = f"[XBLOCK, RBLOCK // {group}]"
    h.line(f"{m} = {full(float('-inf'), dtype, shape)}", "prefix")
    h.line(f"{s} = {full(0.0, dtype, shape)}", "prefix")
    masked = f'tl.where(rmask, {vb}, float("-inf"))'
    h.line(
        f"{v} = tl.reshape({masked}, [XBLOCK, RBLOCK // {group}, {group}])",
        "body",
    )
    if h.interpret:  # the interpreter runs a combine of ours lane by lane (_reductions._lanes)
        nan = f"tl.max(({v} != {v}).to(tl.int8), 2) != 0"
        gmax = f'tl.where({nan}, float("nan"), tl.max({v}, 2))'
    else:
        gmax = f"tl.reduce({v}, 2, _tk_max_combine)"
    h.line(f"{g} = {_combine('max', m, gmax, dtype)}", "body")
    h.line(f'{b} = tl.where({g} == float("-inf"), 0.0, {g})', "body")
    terms = f"tl.sum({_exp_of(h, dtype, f'{v} - {b}[:, :, None]')}, 2)"
    h.line(f"{s} = {s} * {_exp_of(h, dtype, f'{m} - {b}')} + {terms}", "body")
    h.line(f"{m} = {g}", "body")
    return m, s


def check_absorbed(stage: Any, stages: list[Any]) -> None:
    """An absorbed stage's r-loop is dropped (``kernel._Stage`` lists): nothing outside it may
    use a name it assigns, else the kernel is generated without the online form."""
    assigned = {ln.split(" = ", 1)[0] for ln in stage.body if " = " in ln}
    kept = [ln for st in stages for ln in st.init + st.prefix + st.suffix]
    kept += [ln for st in stages if st is not stage for ln in st.body]
    words = set(re.findall(r"\w+", "\n".join(kept)))
    if assigned & words:
        raise OnlineUnavailable(f"the absorbed loop computes {sorted(assigned & words)}")
