"""Reductions in Triton: accumulate per lane of a 2-D block, then combine the lanes.

A persistent reduction's lanes hold the row itself (one "iteration"); a looped one carries an
accumulator per lane across the r-loop. Combining lanes uses tl.sum/max/min/xor_sum and, for
prod and (on a GPU) floating max/min, which propagate NaN as in eager, tl.reduce with a
combine function (``_prelude.py``). Results have shape [XBLOCK, 1] (or [1, XBLOCK] in
the transposed layout, _layout.py) and are "post" values of the current stage (computed after
its r-loop).
"""

from __future__ import annotations

from typing import Any

import torch

from ._layout import BlockLayout
from ._split import SPLITTABLE, partial_name
from ._values import XR, TritonValue, full, highest, literal, lowest
from .errors import CodegenError
from .printer import tl_dtype

_BIG_INDEX = 2**62


def _identity(rtype: str, dtype: torch.dtype) -> float | int:
    return {
        "sum": 0,
        "prod": 1,
        "any": 0,
        "xor_sum": 0,
        "max": lowest(dtype),
        "min": highest(dtype),
        "argmax": lowest(dtype),
        "argmin": highest(dtype),
    }[rtype]


def _combine(rtype: str, acc: str, v: str, dtype: torch.dtype) -> str:
    fl = dtype.is_floating_point
    if rtype == "sum":
        return f"{acc} + {v}"
    if rtype == "prod":
        return f"{acc} * {v}"
    if rtype == "any":
        return f"{acc} | {v}"
    if rtype == "xor_sum":
        return f"{acc} ^ {v}"
    if rtype in ("max", "min"):
        fn = "maximum" if rtype == "max" else "minimum"
        if fl:  # NaN propagates, as in eager: one max.NaN instruction on a GPU, not four
            return f"tl.{fn}({acc}, {v}, propagate_nan=tl.PropagateNan.ALL)"
        return f"tl.{fn}({acc}, {v})"
    raise CodegenError(f"no combine for reduction {rtype!r}")


def _lanes(rtype: str, acc: str, dtype: torch.dtype, lay: BlockLayout, combine: bool = True) -> str:
    """Combine the RBLOCK lanes of ``acc`` into an x-only result ([XBLOCK, 1] or [1, XBLOCK]).

    A floating max/min that propagates NaN is one ``tl.reduce`` of our own combine when
    ``combine`` (on a GPU, each reduction across warps costs a round trip through shared memory
    and a barrier, which a persistent row's program waits on), else a builtin max/min plus a
    NaN test over the lanes: Triton's interpreter runs a combine of ours one lane at a time in
    Python (minutes for rows of 8192), its builtins in numpy."""
    if rtype == "sum":
        return lay.over_r("tl.sum", acc)
    if rtype == "prod":
        return lay.over_r("tl.reduce", acc, "_tk_prod_combine")
    if rtype == "any":
        return lay.over_r("tl.max", f"{acc}.to(tl.int8)") + " != 0"
    if rtype == "xor_sum":
        return lay.over_r("tl.xor_sum", acc)
    big = rtype in ("max", "argmax")
    if dtype.is_floating_point and combine:
        return lay.over_r("tl.reduce", acc, "_tk_max_combine" if big else "_tk_min_combine")
    out = lay.over_r("tl.max" if big else "tl.min", acc)
    if dtype.is_floating_point:
        nan = lay.over_r("tl.max", f"({acc} != {acc}).to(tl.int8)")
        out = f'tl.where({nan} != 0, float("nan"), {out})'
    return out


def broadcast(text: str, value: TritonValue, lay: BlockLayout) -> str:
    """``text`` (the expression of ``value``) as a full 2-D block. A value with no block dims is
    0-d or [1] (a constant, a scalar load): tl.broadcast_to wants the same rank."""
    if not value.deps:
        text = f"tl.reshape({text}, [1, 1])"
    return f"tl.broadcast_to({text}, {lay.block})"


def emit_reduction(
    h: Any, dtype: torch.dtype, src_dtype: torch.dtype, rtype: str, value: TritonValue
) -> Any:
    """Emit ``rtype`` of ``value`` over the r dims in handler ``h``'s current stage."""
    stage = h.stage_index
    looped = h._stage.looped
    if rtype == "welford_reduce":
        return _welford(h, value, looped, dtype)
    if rtype in ("argmax", "argmin"):
        return _arg(h, rtype, value, looped)
    if rtype not in ("sum", "prod", "max", "min", "any", "xor_sum"):
        raise CodegenError(f"reduction type {rtype!r} is not supported by the Triton backend")
    acc_dtype = torch.bool if rtype == "any" else dtype
    v = (
        value.name
        if value.dtype == acc_dtype
        else (
            f"({value.name} != 0)"
            if acc_dtype == torch.bool
            else f"{value.name}.to({tl_dtype(acc_dtype)})"
        )
    )
    vb = h.emit(broadcast(v, value, h.layout), acc_dtype, XR)
    ident = _identity(rtype, acc_dtype)
    acc = h.new_name("_acc")
    if looped and h.split:
        return _split_partial(h, rtype, acc, vb, acc_dtype, dtype)
    if looped:
        h.line(f"{acc} = {full(ident, acc_dtype, h.layout.block)}", "prefix")
        h.line(
            f"{acc} = tl.where(rmask, {_combine(rtype, acc, vb.name, acc_dtype)}, {acc})", "body"
        )
    else:
        h.line(f"{acc} = tl.where(rmask, {vb.name}, {full(ident, acc_dtype)})", "body")
    result = h.emit(
        _lanes(rtype, acc, acc_dtype, h.layout, not h.interpret),
        acc_dtype,
        frozenset({"x"}),
        stage,
        cse=False,
    )
    if result.dtype != dtype:
        result = h.to_dtype(result, dtype)
    return result


def _split_partial(
    h: Any, rtype: str, acc: str, vb: TritonValue, acc_dtype: torch.dtype, dtype: torch.dtype
) -> TritonValue:
    """A split reduction (``_split.py``): the first kernel accumulates its chunk of rows and
    stores the lanes' combination as partial ``[chunk, x]``; the finishing kernel loads the
    chunks of its x block (the identity where there is none) and combines them the same way."""
    if rtype not in SPLITTABLE:
        raise CodegenError(f"reduction {rtype!r} cannot be split (no combine of partials)")
    lay, ident = h.layout, _identity(rtype, acc_dtype)
    part = partial_name(len(h.partials))
    h.partials.append(acc_dtype)
    h.line(f"{acc} = {full(ident, acc_dtype, lay.block)}", "init")
    h.line(f"{acc} = tl.where(rmask, {_combine(rtype, acc, vb.name, acc_dtype)}, {acc})", "body")
    result = TritonValue(h.new_name(), acc_dtype, frozenset({"x"}), h.stage_index)
    h.line(f"{result.name} = {_lanes(rtype, acc, acc_dtype, lay, not h.interpret)}", "partial_out")
    h.line(
        f"tl.store({part} + (tl.program_id(1) * xnumel + xindex), {result.name}, xmask)",
        "partial_out",
    )
    chunks = h.new_name("_part")
    h.line(
        f"{chunks} = tl.load({part} + (rindex * xnumel + xindex), rmask & xmask, "
        f"other={literal(ident, acc_dtype)})",
        "partial_in",
    )
    h.line(
        f"{result.name} = {_lanes(rtype, chunks, acc_dtype, lay, not h.interpret)}", "partial_in"
    )
    return result if result.dtype == dtype else h.to_dtype(result, dtype)


def _arg(h: Any, rtype: str, value: TritonValue, looped: bool) -> TritonValue:
    """Index of the first extreme element along the flattened r range (NaN counts as extreme)."""
    dt = value.dtype
    vb = h.emit(broadcast(value.name, value, h.layout), dt, XR)
    ident = _identity(rtype, dt)
    accv, acci = h.new_name("_accv"), h.new_name("_acci")
    idx = f"tl.broadcast_to(rindex.to(tl.int64), {h.layout.block})"
    if looped:
        op = ">" if rtype == "argmax" else "<"
        better = f"({vb.name} {op} {accv})"
        if dt.is_floating_point:
            better = f"({better} | (({vb.name} != {vb.name}) & ({accv} == {accv})))"
        h.line(f"{accv} = {full(ident, dt, h.layout.block)}", "prefix")
        h.line(f"{acci} = {full(_BIG_INDEX, torch.int64, h.layout.block)}", "prefix")
        cond = h.new_name("_take")
        h.line(f"{cond} = rmask & {better}", "body")
        h.line(f"{accv} = tl.where({cond}, {vb.name}, {accv})", "body")
        h.line(f"{acci} = tl.where({cond}, {idx}, {acci})", "body")
    else:
        h.line(f"{accv} = tl.where(rmask, {vb.name}, {full(ident, dt)})", "body")
        h.line(f"{acci} = tl.where(rmask, {idx}, {_BIG_INDEX})", "body")
    stage = h.stage_index
    best = h.emit(
        _lanes("max" if rtype == "argmax" else "min", accv, dt, h.layout, not h.interpret),
        dt,
        frozenset({"x"}),
        stage,
        cse=False,
    )
    hit = f"({accv} == {best.name})"
    if dt.is_floating_point:
        hit = f"({hit} | (({accv} != {accv}) & ({best.name} != {best.name})))"
    return h.emit(
        h.layout.over_r("tl.min", f"tl.where({hit}, {acci}, {_BIG_INDEX})"),
        torch.int64,
        frozenset({"x"}),
        stage,
        cse=False,
    )


def _welford(
    h: Any, value: TritonValue, looped: bool, dtype: torch.dtype = torch.float32
) -> tuple[TritonValue, TritonValue, TritonValue]:
    """(mean, m2, weight) of the row, in float64 when ``dtype`` is (float32 rows summed on the
    CPU, as eager), else float32."""
    wdt = torch.float64 if dtype == torch.float64 else torch.float32
    tf = tl_dtype(wdt)
    v = value.name if value.dtype == wdt else f"{value.name}.to({tf})"
    vb = h.emit(broadcast(v, value, h.layout), wdt, XR)
    stage = h.stage_index
    x = frozenset({"x"})
    if not looped:
        # the whole row is in registers: two passes over it (mean, then the squared deviations
        # from it) are exact and cheap, with no per-element divide; every row has rnumel values
        w = h.emit(f"tl.zeros({h.layout.x_shape}, {tf}) + rnumel", wdt, x, stage, cse=False)
        if wdt == torch.float64:
            # the sum of float64 values can overflow where their mean does not (rows of 1e308):
            # sum them scaled by a power of two near the largest (exact), then scale back
            big = h.emit(
                h.layout.over_r("tl.max", f"tl.where(rmask, tl.abs({vb.name}), 0.0)"),
                wdt,
                x,
                stage,
                cse=False,
            )
            # the power of two of the largest's exponent, from its bits (exp2/log2 are float32)
            pow2 = (
                f"({big.name}.to(tl.int64, bitcast=True) & 0x7FF0000000000000)"
                ".to(tl.float64, bitcast=True)"
            )
            scale = h.emit(
                f"tl.where(({big.name} >= 2.2250738585072014e-308) & "
                f"({big.name} < float('inf')), {pow2}, 1.0)",
                wdt,
                x,
                stage,
                cse=False,
            )
            # times 1 / scale: a power of two in range both ways, so exact, and no divide per value
            mean = h.emit(
                h.layout.over_r("tl.sum", f"tl.where(rmask, {vb.name} * (1.0 / {scale.name}), 0.0)")
                + f" / {w.name} * {scale.name}",
                wdt,
                x,
                stage,
                cse=False,
            )
        else:
            s = h.emit(
                h.layout.over_r("tl.sum", f"tl.where(rmask, {vb.name}, 0.0)"),
                wdt,
                x,
                stage,
                cse=False,
            )
            mean = h.emit(f"{s.name} / {w.name}", wdt, x, stage, cse=False)
        dev = h.new_name("_dev")
        h.line(f"{dev} = tl.where(rmask, {vb.name} - {mean.name}, 0.0)", "suffix")
        m2 = h.emit(h.layout.over_r("tl.sum", f"{dev} * {dev}"), wdt, x, stage, cse=False)
        return mean, m2, w
    if wdt == torch.float32 and h.aligned is None and h.options.welford_shifted_sums:
        m, m2a, wa = _shifted_sums(h, vb.name, tf)
    else:
        m, m2a, wa = _welford_lanes(h, vb.name, tf)
    # Chan et al.: combine lanes exactly from their (mean, m2, weight)
    w = h.emit(h.layout.over_r("tl.sum", wa), wdt, x, stage, cse=False)
    mean = h.emit(
        h.layout.over_r("tl.sum", f"{wa} * {m}") + f" / {w.name}", wdt, x, stage, cse=False
    )
    m2 = h.emit(
        h.layout.over_r("tl.sum", f"{m2a} + {wa} * ({m} - {mean.name}) * ({m} - {mean.name})"),
        wdt,
        x,
        stage,
        cse=False,
    )
    return mean, m2, w


def _shifted_sums(h: Any, v: str, tf: str) -> tuple[str, str, str]:
    """A looped float32 row's lanes as (mean, m2, weight) from sums shifted by each lane's first
    value ``K``: ``s1 = sum(v - K)``, ``s2 = sum((v - K)^2)``, then mean ``K + s1 / n`` and m2
    ``s2 - s1 * s1 / n`` once after the loop, combined across lanes with Chan's formula as
    before.

    Why: Welford's update (a running mean, a product with the new mean, three masked selects)
    took 12.1 sm_90 instructions a value in a batch norm's statistics over channels-last images,
    this 10.2 (benchmarks/triton_kernel_resources.py; the rest is the loads' conversion and the
    index). A shift shared by the row (the first block's mean, a cross-warp sum in the loop's
    first iteration) measured slower on the H200 (37% of the bandwidth against Welford's 44%).

    As stable as Welford's: the sums cancel only as far as a lane's spread about ``K``
    (``s2 = m2 + n (mean - K)^2``, the second term about m2 itself on average, ``K`` being a
    sample of the lane); each lane sums rnumel / RBLOCK values at most. An r-loop starts at 0
    and masks a lane only from some iteration on (past the row's or the chunk's end), so the
    loop's first iteration gives each lane's shift; a lane no iteration updated (a row shorter
    than RBLOCK) gets weight 0, mean and m2 0, whatever its masked "first value" was (``1 / 0``
    of a masked load is inf, and 0 * inf is NaN in the lanes' combination). A lane's count is
    the number of iterations that reached it, ``ceil((rnumel - rbase) / RBLOCK)``, computed once
    after the loop (rmask is ``rindex < rnumel`` with ``rindex = roffset + rbase``: a Welford
    reduction is never a split kernel's, ``SPLITTABLE``); counted in the loop it cost about four
    sm_90 instructions a value (a compare, a select and an add per value, and the positions),
    a third of a bfloat16 batch norm's statistics over NCHW images. m2 is clamped at 0 (a
    rounding below it); NaN stays NaN."""
    if h.split:
        raise CodegenError("a Welford reduction cannot be split (no combine of partials)")
    lay = h.layout
    shift, s1, s2, cnt = (h.new_name(n) for n in ("_wshift", "_ws1", "_ws2", "_wcnt"))
    for name in (shift, s1, s2):
        h.line(f"{name} = tl.zeros({lay.block}, {tf})", "prefix")
    d = h.new_name("_wd")
    h.line(f"{shift} = tl.where(roffset == 0, {v}, {shift})", "body")
    h.line(f"{d} = tl.where(rmask, {v} - {shift}, 0.0)", "body")
    h.line(f"{s1} = {s1} + {d}", "body")
    h.line(f"{s2} = {s2} + {d} * {d}", "body")
    m, m2a, wa = h.new_name("_wmean"), h.new_name("_wm2"), h.new_name("_wweight")
    # rbase < RBLOCK, so the dividend is never negative (floor and truncation agree)
    h.line(f"{cnt} = ((rnumel - rbase + (RBLOCK - 1)) // RBLOCK).to({tf})", "suffix")
    # The count tied to the sums by a term that is always 0 (NaN and inf included): a count
    # of r alone gets its own layouts in Triton's layout pass, one of them the whole row in
    # each thread (254 registers a thread for the NCHW batch-norm statistics, against 40)
    h.line(f"{wa} = ({s1} != {s1}).to({tf}) * 0.0 + {cnt}", "suffix")
    h.line(f"{m} = tl.where({wa} > 0, {shift} + {s1} / tl.maximum({wa}, 1.0), 0.0)", "suffix")
    h.line(
        f"{m2a} = tl.where({wa} > 0, tl.maximum({s2} - {s1} * ({s1} / tl.maximum({wa}, 1.0)), "
        "0.0, propagate_nan=tl.PropagateNan.ALL), 0.0)",
        "suffix",
    )
    return m, m2a, wa


def _welford_lanes(h: Any, v: str, tf: str) -> tuple[str, str, str]:
    """A looped row's lanes as (mean, m2, weight) by Welford's update, one value at a time: for
    float64 rows, the aligned walk (whose first block skips the lanes before the row's start,
    so a lane's first iteration is not the loop's) and ``welford_shifted_sums=False``."""
    m, m2a, wa = h.new_name("_wmean"), h.new_name("_wm2"), h.new_name("_wweight")
    for name in (m, m2a, wa):
        h.line(f"{name} = tl.zeros({h.layout.block}, {tf})", "prefix")
    wn, d, mn = h.new_name("_wn"), h.new_name("_wd"), h.new_name("_wmn")
    h.line(f"{wn} = tl.where(rmask, {wa} + 1.0, {wa})", "body")
    h.line(f"{d} = {v} - {m}", "body")
    if tf == "tl.float32" and h.aligned is None:
        # Each r-loop starts at 0 and masks lanes only from some iteration on, so a lane updated
        # in iteration k was updated in every earlier one: its weight is k + 1, the same for
        # every lane it updates. One reciprocal per iteration then, not a divide per value
        # (about ten sm_90 instructions with its range fix-ups). Not for the aligned walk, whose
        # first block skips the lanes before the row's start.
        rcp = h.new_name("_wrcp")
        h.line(f"{rcp} = 1.0 / (roffset // RBLOCK + 1.0)", "body")
        h.line(f"{mn} = tl.where(rmask, {m} + {d} * {rcp}, {m})", "body")
    else:
        h.line(f"{mn} = tl.where(rmask, {m} + {d} / tl.maximum({wn}, 1.0), {m})", "body")
    h.line(f"{m2a} = tl.where(rmask, {m2a} + {d} * ({v} - {mn}), {m2a})", "body")
    h.line(f"{m} = {mn}", "body")
    h.line(f"{wa} = {wn}", "body")
    return m, m2a, wa


def welford_combine(
    h: Any, parts: tuple[TritonValue, ...], looped: bool
) -> tuple[TritonValue, ...]:
    """Combine partial (mean, m2, weight) triples along r into one per row (Chan et al.), in
    float64 if the partials are."""
    wdt = torch.float64 if any(p.dtype == torch.float64 for p in parts) else torch.float32
    x, stage, tf = frozenset({"x"}), h.stage_index, tl_dtype(wdt)
    mb, m2b, wb = (
        h.emit(broadcast(p.name if p.dtype == wdt else f"{p.name}.to({tf})", p, h.layout), wdt, XR)
        for p in parts
    )
    if looped:
        m, m2a, wa = h.new_name("_cmean"), h.new_name("_cm2"), h.new_name("_cweight")
        for name in (m, m2a, wa):
            h.line(f"{name} = tl.zeros({h.layout.block}, {tf})", "prefix")
        nw, d, r = h.new_name("_cnw"), h.new_name("_cd"), h.new_name("_cr")
        h.line(f"{nw} = {wa} + tl.where(rmask, {wb.name}, 0.0)", "body")
        h.line(f"{d} = {mb.name} - {m}", "body")
        h.line(
            f"{r} = tl.where(rmask & ({nw} > 0), {wb.name} / tl.where({nw} > 0, {nw}, 1.0), 0.0)",
            "body",
        )
        h.line(f"{m} = {m} + {d} * {r}", "body")
        h.line(f"{m2a} = {m2a} + tl.where(rmask, {m2b.name} + {d} * {d} * {wa} * {r}, 0.0)", "body")
        h.line(f"{wa} = {nw}", "body")
        lanes_m, lanes_m2, lanes_w = m, m2a, wa
    else:
        lanes_w = h.new_name("_cw")
        h.line(f"{lanes_w} = tl.where(rmask, {wb.name}, 0.0)", "body")
        lanes_m, lanes_m2 = mb.name, h.new_name("_cm2")
        h.line(f"{lanes_m2} = tl.where(rmask, {m2b.name}, 0.0)", "body")
    w = h.emit(h.layout.over_r("tl.sum", lanes_w), wdt, x, stage, cse=False)
    mean = h.emit(
        h.layout.over_r("tl.sum", f"{lanes_w} * {lanes_m}") + f" / {w.name}",
        wdt,
        x,
        stage,
        cse=False,
    )
    m2 = h.emit(
        h.layout.over_r(
            "tl.sum",
            f"{lanes_m2} + {lanes_w} * ({lanes_m} - {mean.name}) * ({lanes_m} - {mean.name})",
        ),
        wdt,
        x,
        stage,
        cse=False,
    )
    return mean, m2, w
