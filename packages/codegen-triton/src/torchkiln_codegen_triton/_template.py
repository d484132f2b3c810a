"""A matrix product computed in the kernel of its epilogue (loop-ir's ``KernelSpec.template``).

The kernel's program ``pid`` computes one BLOCK_M x BLOCK_N tile of the product: the tiles are
walked in groups of ``group_m`` tile rows (the programs running at once share their rows of
``a`` and columns of ``b`` in L2), and the K dimension in steps of BLOCK_K, each a ``tl.dot``
accumulated in float32. The bias, when there is one, is added to the float32 sum and the result
rounded once to the product's dtype, as cuBLAS's bias epilogue does (eager's ``addmm``); the
epilogue's bodies then read that value where they would have loaded the product.

The tile's elements are the epilogue's x block: ``xindex`` is the 2-D [BLOCK_M, BLOCK_N] block
``row * N + column`` and ``xmask`` the rows and columns inside the product, so the pointwise
bodies (their x variables recovered from ``xindex`` by ``//`` and ``%``, their loads and stores
masked by ``xmask``) run as they do in a 1-D kernel, on a 2-D block.

The tile (``Tile``) is a launch choice made per product: ``default_tile`` is the heuristic,
``tile_candidates`` what ``TritonBackend.choose_matmul_template`` times under ``autotune``.
Whether a product is computed in its epilogue's kernel at all is ``choose``'s decision: timed
under ``autotune`` (the max-autotune modes), predicted from the sizes otherwise (``predict``),
so that a default compile builds no kernel it does not run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.utils._pytree as pytree
from torchkiln_loop_ir.backend import BufferRef, BufferSpec, ExternCall, KernelSpec, MatmulTemplate
from torchkiln_loop_ir.codecache import CodeCache
from torchkiln_loop_ir.ir import product
from torchkiln_loop_ir.mkldnn import time_min

from ._compat import interpreting
from .autotune import Config
from .errors import CodegenError
from .printer import tl_dtype


@dataclass(frozen=True)
class Tile:
    """A launch choice of the template: the block sizes, the programs sharing tile rows, warps
    and software-pipelining stages."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3

    def items(self) -> tuple[tuple[str, int], ...]:
        """As loop-ir keeps it (``MatmulTemplate.tile``)."""
        return tuple(vars(self).items())

    @classmethod
    def of(cls, spec: KernelSpec, interpret: bool) -> Tile:
        """The tile of ``spec``'s template, or the default when it names none."""
        template = spec.template
        assert template is not None
        if not template.tile:
            return default_tile(template, spec.buffers[template.product].dtype, interpret)
        return cls(**dict(template.tile))

    def programs(self, template: MatmulTemplate) -> int:
        return _cdiv(template.m, self.block_m) * _cdiv(template.n, self.block_n)


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _fit(size: int, block: int) -> int:
    """``block`` halved while it is more than twice ``size`` (at least 16, ``tl.dot``'s least)."""
    while block > 16 and block >= 2 * size:
        block //= 2
    return block


def default_tile(template: MatmulTemplate, dtype: torch.dtype, interpret: bool = False) -> Tile:
    """The heuristic tile: 128 x 128 x 64 with 8 warps for large 16-bit products, narrower where
    the product is; float32 (no tensor-core 16-bit inputs) halves BLOCK_K. Under the interpreter
    small blocks (each program is numpy on the CPU)."""
    if interpret:
        return Tile(_fit(template.m, 32), _fit(template.n, 32), _fit(template.k, 32), 4, 1, 1)
    return _fitted(template, dtype, 128, 128)


def _fitted(template: MatmulTemplate, dtype: torch.dtype, block_m: int, block_n: int) -> Tile:
    """A tile of at most ``block_m`` x ``block_n`` x 64 (32 for float32) fitted to the product,
    8 warps from 128 x 128 up (4 below), 3 stages."""
    block_k = 32 if dtype == torch.float32 else 64
    block_m, block_n = _fit(template.m, block_m), _fit(template.n, block_n)
    warps = 8 if block_m * block_n >= 128 * 128 else 4
    return Tile(block_m, block_n, _fit(template.k, block_k), 8, warps, 3)


def tile_candidates(template: MatmulTemplate, dtype: torch.dtype) -> list[Tile]:
    """The tiles ``choose_matmul_template`` times, each fitted to the product's sizes: the
    default (128 x 128 x 64) and 128 x 256 x 64, 8 warps and 3 stages (BLOCK_K 32 for float32).
    Two only: each is a Triton compile at the graph's compile time. Of seven tried on an H100
    (session 42: BERT's, ViT's, DistilBERT's and Llama's products at full size and BERT's at
    batch 1), these two were the fastest on every product."""
    wide = _fitted(template, dtype, 128, 256)
    tiles = [default_tile(template, dtype)]
    return tiles if wide in tiles else [*tiles, wide]


def template_config(spec: KernelSpec, interpret: bool) -> Config:
    """The launch of ``spec``'s template: a program a tile, the tile's warps and stages
    (never autotuned: the tile is the choice)."""
    assert spec.template is not None
    tile = Tile.of(spec, interpret)
    return Config(
        tile.block_m * tile.block_n,
        1,
        tile.num_warps,
        False,
        grid=tile.programs(spec.template),
        num_stages=tile.num_stages,
        reason="matmul template",
    )


def input_precision(dtype: torch.dtype, interpret: bool) -> str:
    """``tl.dot``'s precision for float32 operands: TF32 only where torch allows it (eager's
    float32 product is IEEE unless ``torch.backends.cuda.matmul.allow_tf32``); 16-bit operands
    ignore it."""
    tf32 = torch.backends.cuda.matmul.allow_tf32 and not interpret
    return "tf32" if dtype != torch.float32 or tf32 else "ieee"


def head(
    spec: KernelSpec, names: Mapping[str, str], tile: Tile, interpret: bool
) -> tuple[list[str], str]:
    """The kernel's lines up to its epilogue (the product's tile in ``tk_acc``, float32, rounded
    to the product's dtype; ``xindex`` and ``xmask`` its elements), and ``tk_acc``."""
    t = spec.template
    if t is None:
        raise CodegenError(f"kernel {spec.name}: not a template")
    bufs = spec.buffers
    out = bufs[t.product]
    a, b = bufs[t.a], bufs[t.b]
    sam, sak = (int(s) for s in a.stride)
    sbk, sbn = (int(s) for s in b.stride)
    bm, bn, bk, gm = tile.block_m, tile.block_n, tile.block_k, tile.group_m
    tiles_m, tiles_n = _cdiv(t.m, bm), _cdiv(t.n, bn)
    even_k = t.k % bk == 0
    pa, pb = names[t.a], names[t.b]
    off_a = f" + {int(a.offset)}" if int(a.offset) else ""
    off_b = f" + {int(b.offset)}" if int(b.offset) else ""
    precision = input_precision(out.dtype, interpret)
    lines = [
        f"# matmul template: {t.m}x{t.k}x{t.n}{' + bias' if t.bias else ''}, tile {bm}x{bn}x{bk}, "
        f"{gm} tile rows a group, {tile.num_warps} warps, {tile.num_stages} stages",
        "pid = tl.program_id(0)",
        f"group = pid // {gm * tiles_n}",
        f"first_m = group * {gm}",
        f"rows = tl.minimum({tiles_m} - first_m, {gm})",
        "pid_m = first_m + (pid % rows)",
        f"pid_n = (pid % {gm * tiles_n}) // rows",
        f"rm = pid_m * {bm} + tl.arange(0, {bm})",
        f"rn = pid_n * {bn} + tl.arange(0, {bn})",
        f"rk = tl.arange(0, {bk})",
        # rows and columns past the product wrap to valid ones: loaded unmasked, never stored
        _wrapped("am", "rm", t.m, bm),
        _wrapped("bn", "rn", t.n, bn),
        f"a_ptrs = {pa}{off_a} + am[:, None] * {sam} + rk[None, :] * {sak}",
        f"b_ptrs = {pb}{off_b} + rk[:, None] * {sbk} + bn[None, :] * {sbn}",
        f"tk_acc = tl.zeros([{bm}, {bn}], dtype=tl.float32)",
        f"for k in range(0, {t.k}, {bk}):",
    ]
    if even_k:
        lines += ["    a_blk = tl.load(a_ptrs)", "    b_blk = tl.load(b_ptrs)"]
    else:
        lines += [
            f"    a_blk = tl.load(a_ptrs, mask=rk[None, :] < {t.k} - k, other=0)",
            f"    b_blk = tl.load(b_ptrs, mask=rk[:, None] < {t.k} - k, other=0)",
        ]
    lines += [
        f'    tk_acc += tl.dot(a_blk, b_blk, input_precision="{precision}")',
        f"    a_ptrs += {bk * sak}",
        f"    b_ptrs += {bk * sbk}",
    ]
    if t.bias is not None:
        bias = bufs[t.bias]
        strides = [int(s) for s in bias.stride]
        sizes = [int(s) for s in bias.size]
        s0, s1 = ([0, *strides] if len(strides) == 1 else strides) if strides else (0, 0)
        z0, z1 = ([1, *sizes] if len(sizes) == 1 else sizes) if sizes else (1, 1)
        terms = [f"{names[t.bias]}" + (f" + {int(bias.offset)}" if int(bias.offset) else "")]
        if z0 != 1 and s0:
            terms.append(f"am[:, None] * {s0}")
        if z1 != 1 and s1:
            terms.append(f"bn[None, :] * {s1}")
        ptr = " + ".join(terms)
        if len(terms) < 3:
            ptr += f" + tl.zeros([{bm}, {bn}], tl.int32)"
        value = f"tl.load({ptr})"
        if bias.dtype == torch.bfloat16 and interpret:
            value = f"_tk_bf16_to_f32({value})"
        else:
            value += ".to(tl.float32)"
        lines.append(f"tk_acc += {value}")
    if out.dtype == torch.bfloat16:
        if interpret:
            lines.append("tk_acc = _tk_round_bf16(tk_acc)")
        else:
            lines.append("tk_acc = _tk_rounded(tk_acc.to(tl.bfloat16)).to(tl.float32)")
    elif out.dtype == torch.float16:
        lines.append(f"tk_acc = _tk_rounded(tk_acc.to({tl_dtype(out.dtype)})).to(tl.float32)")
    elif out.dtype != torch.float32:
        raise CodegenError(f"kernel {spec.name}: a template of dtype {out.dtype}")
    lines += [
        f"xindex = rm[:, None] * {t.n} + rn[None, :]",
        f"xmask = (rm[:, None] < {t.m}) & (rn[None, :] < {t.n})",
    ]
    return ["    " + ln for ln in lines], "tk_acc"


def _wrapped(name: str, index: str, size: int, block: int) -> str:
    """``index % size``; said to be runs of ``block`` contiguous values (vector loads along
    it) only when ``block`` divides ``size``: otherwise the last block wraps to the start."""
    if size % block:
        return f"{name} = {index} % {size}"
    return f"{name} = tl.max_contiguous(tl.multiple_of({index} % {size}, {block}), {block})"


def template_shape(tile: Tile) -> str:
    """The shape of an x-dependent value in the template's epilogue."""
    return f"[{tile.block_m}, {tile.block_n}]"


#: 2*M*K*N below which a product is left to the extern untimed (a launch is the whole cost
#: there, and the decision would differ from run to run)
MIN_FLOPS = 1e8
#: the fused kernel is taken when it takes at most this share of the extern and kernel's time
FASTER = 0.97
#: decisions by (the fused kernel's text at the default tile, its operands' layouts): the
#: layers of a model repeat one product and epilogue, timed once a process
_DECISIONS: dict[tuple[Any, ...], tuple[tuple[tuple[str, int], ...] | None, str]] = {}


def _tensor(spec: BufferSpec) -> torch.Tensor:
    """A tensor of ``spec``'s layout holding random values (zeros for integers and booleans:
    indices stay in range)."""
    size = [int(s) for s in spec.size]
    stride = [int(s) for s in spec.stride]
    extent = int(spec.offset) + sum((s - 1) * st for s, st in zip(size, stride) if s > 0) + 1
    if spec.dtype.is_floating_point:
        storage = torch.randn(extent, dtype=spec.dtype, device=spec.device)
    else:
        storage = torch.zeros(extent, dtype=spec.dtype, device=spec.device)
    return storage.as_strided(size, stride, int(spec.offset))


Answer = tuple[tuple[tuple[str, int], ...] | None, str]


def choose(
    backend: Any,
    requests: Sequence[tuple[KernelSpec, ExternCall, KernelSpec]],
    buffers: Mapping[str, BufferSpec],
) -> list[Answer]:
    """``TritonBackend.choose_matmul_template``: for each (fused kernel, extern, kernel), a tile
    of the fused kernel when it beats the extern product followed by the kernel, else None; and
    why, for the log.

    Pairs whose epilogue moves less than ``MIN_EPILOGUE_SHARE`` of the product's time are kept
    apart in every mode. A decision timed before (in this process, or by an earlier one on this
    kind of GPU: the code cache's ``templates`` entries) is reused. Otherwise, under
    ``TritonOptions.autotune`` (the max-autotune modes), the fastest tile is taken when it is
    ``FASTER`` than the pair: every candidate of every pair is compiled in one
    ``compile_kernels`` call (the precompile pool builds them at once), and each tile's outputs
    are checked against the unfused pair's on the same inputs before it is timed. Without it
    nothing is compiled or timed: the default tile is taken where ``predicted`` says so."""
    answers: list[Answer | None] = [None] * len(requests)
    todo: dict[tuple[Any, ...], list[int]] = {}
    bandwidth, sms = device_bandwidth(), device_sms()
    for i, (fused, _, kernel) in enumerate(requests):
        t = fused.template
        assert t is not None
        dtype, device = buffers[t.product].dtype, buffers[t.product].device
        if interpreting() or device.type != "cuda":
            answers[i] = (None, "templates are chosen on a GPU only")
        elif dtype not in (torch.bfloat16, torch.float16):
            answers[i] = (None, f"{dtype}: cuBLAS's product without tensor-core 16-bit inputs")
        elif 2 * t.m * t.n * t.k < MIN_FLOPS:
            answers[i] = (None, f"below {MIN_FLOPS:.0e} FLOP, untimed")
        elif (share := epilogue_share(t, kernel, buffers)) < MIN_EPILOGUE_SHARE:
            answers[i] = (
                None,
                f"the epilogue's traffic is {share:.2f} of the product's time, untimed",
            )
        else:
            key = _key(backend, fused, buffers)
            known = _DECISIONS.get(key) or _kept(backend, key)
            if known is not None:
                answers[i] = _DECISIONS[key] = known
            elif backend.options.autotune:
                todo.setdefault(key, []).append(i)
            else:
                answers[i] = predicted(t, kernel, buffers, bandwidth, sms)
    if todo:
        for key, answer in _measure(backend, requests, buffers, todo).items():
            _DECISIONS[key] = answer
            _keep(backend, key, answer)
            for i in todo[key]:
                answers[i] = answer
    return [a if a is not None else (None, "not timed") for a in answers]


#: FLOP a byte of memory traffic takes as long as, for a 16-bit tensor-core product (an H100:
#: about 600 TFLOP/s reached by cuBLAS against about 3 TB/s; an H200's balance is close)
MACHINE_BALANCE = 200.0
#: pairs whose epilogue moves less than this share of the product's estimated time are kept
#: untimed: the template's product runs at about two thirds of cuBLAS's speed at these sizes, so
#: the epilogue's pass must save at least half the product's time to tie (session 42, an H100:
#: BERT's GELU at 0.52 tied, Llama's SiLU times the other product at 0.58 won; BERT's output
#: product and residual add, at 0.19, lost 82.6 us against 68.8)
MIN_EPILOGUE_SHARE = 0.3


def epilogue_share(
    t: MatmulTemplate, kernel: KernelSpec, buffers: Mapping[str, BufferSpec]
) -> float:
    """The epilogue kernel's memory traffic (what it reads and writes, the product included),
    over the product's estimated time (its FLOP or its operands' and result's bytes, whichever
    takes longer), both in bytes at ``MACHINE_BALANCE``."""

    epilogue = sum(_nbytes(buffers[n]) for n in kernel.args)
    extern = max(
        2 * t.m * t.n * t.k / MACHINE_BALANCE,
        sum(_nbytes(buffers[n]) for n in (*t.operands, t.product)),
    )
    return epilogue / extern


#: an H100's reach at the full-size suites' products (session 42: cuBLAS's 16-bit product at
#: about 600 TFLOP/s, the template's tile loop at about two thirds of that, copies at about
#: 3 TB/s) and what a kernel costs beyond its traffic (its launch, its first and last waves)
PRODUCT_FLOPS = 600e12
TEMPLATE_SPEED = 2 / 3
BANDWIDTH = 3e12
KERNEL_US = 5.0
#: copy bandwidth of GPUs other than the H100 (the H200's HBM3e: the same tensor cores, so the
#: pair's epilogue pass is cheaper there and fewer templates pay)
BANDWIDTHS = {"H200": 4.3e12}
#: streaming multiprocessors when no GPU says (an H100's and an H200's)
SMS = 132
#: a template is taken untimed when predicted to take at most this share of the pair's time.
#: On an H100 (predicted share / the share measured in the model or on the device): BERT's,
#: ViT's and DistilBERT's GELU 0.97, 0.96, 0.99 / 1.00-1.02 (ties, session 42); Llama's SiLU
#: times the other product 0.94 / 0.90 (the model 2.1% faster with it, session 44); BERT's
#: GELU at batch 1 0.83 / 0.31; ConvNeXt-tiny's last stage 0.96 / 1.13 (its kernels' device
#: time, session 44: the model was 0.5% slower with it, taken at 0.92 before the waves' term)
PREDICTED_FASTER = 0.95
#: products of a shorter K are never taken untimed: with a few K steps a tile the kernel's
#: cost is its epilogue's, which the model does not see (session 43, an H100: ConvNeXt-tiny's
#: fc1s of K 96, 192 and 384, predicted at 0.39-0.70 of the pair, took about 1.05 of it at the
#: best tile timed, and the model 6.9% longer with them)
MIN_PREDICTED_K = 512


def device_bandwidth() -> float:
    """The current GPU's copy bandwidth for ``predict`` (``BANDWIDTHS``, else ``BANDWIDTH``)."""
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return next((bw for key, bw in BANDWIDTHS.items() if key in name), BANDWIDTH)


def device_sms() -> int:
    """The current GPU's streaming multiprocessors for ``predict`` (else ``SMS``)."""
    if not torch.cuda.is_available():
        return SMS
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


def waves(t: MatmulTemplate, dtype: torch.dtype, sms: int = SMS) -> float:
    """How much longer the template's grid takes than its tiles' share of the GPU: the default
    tile's programs run in whole waves of one a multiprocessor, so 600 tiles on 132 take the
    time of 660 (ConvNeXt-tiny's last-stage fc1, 4.55 waves run as 5). cuBLAS picks its own
    tile per shape, so the extern has no such term."""
    tile = default_tile(t, dtype)
    tiles = math.ceil(t.m / tile.block_m) * math.ceil(t.n / tile.block_n)
    return math.ceil(tiles / sms) * sms / tiles


def predict(
    t: MatmulTemplate,
    kernel: KernelSpec,
    buffers: Mapping[str, BufferSpec],
    bandwidth: float = BANDWIDTH,
    sms: int = SMS,
) -> tuple[float, float]:
    """(the fused kernel's, the extern and kernel's) estimated time in microseconds. The
    extern runs at ``PRODUCT_FLOPS`` or moves its operands and result at ``bandwidth``,
    whichever takes longer; the kernel then moves its reads and writes. The fused kernel's
    product runs at ``TEMPLATE_SPEED`` of that, and the epilogue's other traffic (all but the
    product) overlaps it, in whole waves of its tiles over ``sms`` multiprocessors (``waves``);
    each kernel costs ``KERNEL_US`` more."""
    flop = 2 * t.m * t.n * t.k
    operands = sum(_nbytes(buffers[n]) for n in t.operands)
    result = _nbytes(buffers[t.product])
    epilogue = sum(_nbytes(buffers[n]) for n in kernel.args)
    extern = max(flop / PRODUCT_FLOPS, (operands + result) / bandwidth) * 1e6
    pair = extern + KERNEL_US + epilogue / bandwidth * 1e6 + KERNEL_US
    fused = max(flop / (PRODUCT_FLOPS * TEMPLATE_SPEED), (operands + epilogue - result) / bandwidth)
    fused *= waves(t, buffers[t.product].dtype, sms)
    return fused * 1e6 + KERNEL_US, pair


def predicted(
    t: MatmulTemplate,
    kernel: KernelSpec,
    buffers: Mapping[str, BufferSpec],
    bandwidth: float = BANDWIDTH,
    sms: int = SMS,
) -> Answer:
    """The untimed decision (``predict`` at ``bandwidth`` and ``sms``): the default tile, or
    None."""
    if t.k < MIN_PREDICTED_K:
        return None, f"K {t.k} below {MIN_PREDICTED_K}: not predicted (untimed)"
    fused, pair = predict(t, kernel, buffers, bandwidth, sms)
    text = f"predicted template {fused:.1f} us, extern and kernel {pair:.1f} us (untimed)"
    if fused <= PREDICTED_FASTER * pair:
        return default_tile(t, buffers[t.product].dtype).items(), text
    return None, f"not predicted faster: {text}"


def _nbytes(spec: BufferSpec) -> int:
    return int(product(spec.size)) * spec.dtype.itemsize


def _disk_key(key: tuple[Any, ...]) -> str:
    """A decision's entry name: the key with the GPU's name and the versions that time it."""
    import triton

    from . import __version__  # the package imports this module

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    text = repr((key, device, torch.__version__, triton.__version__, __version__))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _kept(backend: Any, key: tuple[Any, ...]) -> Answer | None:
    """A decision an earlier process timed on this kind of GPU (the code cache's
    ``templates`` entries), or None."""
    cache = CodeCache.at("templates", backend.options.cache_dir)
    name = _disk_key(key)
    if cache.verified(name) is None:
        return None
    try:
        saved = json.loads((cache.entry_dir(name) / "decision.json").read_text())
        tile = tuple((str(k), int(v)) for k, v in saved["tile"]) if saved["tile"] else None
        return tile, f"{saved['why']} (timed by an earlier process)"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _keep(backend: Any, key: tuple[Any, ...], answer: Answer) -> None:
    """Save a timed decision for later processes (a failure to write only costs the timing)."""
    tile, why = answer
    if why.startswith("the template"):  # a failure, not a timing: tried again next time
        return
    text = json.dumps({"tile": [list(kv) for kv in tile] if tile else None, "why": why})
    with contextlib.suppress(OSError):
        CodeCache.at("templates", backend.options.cache_dir).get_or_build(
            _disk_key(key), lambda d: (d / "decision.json").write_text(text)
        )


def _key(backend: Any, fused: KernelSpec, buffers: Mapping[str, BufferSpec]) -> tuple[Any, ...]:
    """What a decision depends on: the fused kernel's text at the default tile (the product's
    sizes and the epilogue) and its arguments' layouts."""
    from ._assemble import generate  # _assemble imports this module

    text = generate(fused, looped=False, options=backend.options, interpret=False).source
    return (text, tuple((n, buffers[n].stride, buffers[n].offset) for n in fused.args))


def _measure(
    backend: Any,
    requests: Sequence[tuple[KernelSpec, ExternCall, KernelSpec]],
    buffers: Mapping[str, BufferSpec],
    todo: Mapping[tuple[Any, ...], list[int]],
) -> dict[tuple[Any, ...], Answer]:
    """Each key's answer, from its first request: the candidates of all compiled together."""
    plans = []
    for key, (first, *_) in todo.items():
        fused, extern, kernel = requests[first]
        t = fused.template
        assert t is not None
        tiles = tile_candidates(t, buffers[t.product].dtype)
        specs = [replace(fused, template=replace(t, tile=tile.items())) for tile in tiles]
        plans.append((key, fused, extern, kernel, tiles, specs))
    out: dict[tuple[Any, ...], Answer] = {}
    try:
        compiled = backend.compile_kernels([s for p in plans for s in (p[3], *p[5])])
    except Exception as e:  # noqa: BLE001 - the template is an option: the pairs still work
        return {
            p[0]: (None, f"the templates failed ({type(e).__name__}: {e}): kept") for p in plans
        }
    at = 0
    for key, fused, extern, kernel, tiles, specs in plans:
        kernels = compiled[at : at + 1 + len(specs)]
        at += 1 + len(specs)
        try:
            out[key] = _time(fused, extern, kernel, buffers, tiles, kernels)
        except Exception as e:  # noqa: BLE001 - as above
            out[key] = (None, f"the template failed ({type(e).__name__}: {e}): kept")
    return out


def _time(
    fused: KernelSpec,
    extern: ExternCall,
    kernel: KernelSpec,
    buffers: Mapping[str, BufferSpec],
    tiles: Sequence[Tile],
    compiled: Sequence[Any],
) -> Answer:
    t = fused.template
    assert t is not None
    tensors = {n: _tensor(buffers[n]) for n in {*fused.args, *kernel.args}}

    def arg(x: Any) -> Any:
        return tensors[x.name] if isinstance(x, BufferRef) else x

    args = pytree.tree_map(arg, extern.args)
    kwargs = pytree.tree_map(arg, dict(extern.kwargs))
    views = [
        (n, [int(s) for s in buffers[n].size], [int(s) for s in buffers[n].stride]) for n in t.names
    ]
    unfused_kernel, candidates = compiled[0], compiled[1:]

    def unfused() -> None:
        product = extern.op(*args, **kwargs)
        for name, size, stride in views:
            tensors[name] = product.as_strided(size, stride)
        unfused_kernel(*(tensors[n] for n in kernel.args))

    unfused()
    expected = [tensors[n].clone() for n in kernel.outputs]
    fns: dict[str, Callable[[], Any]] = {"extern": unfused}
    for i, k in enumerate(candidates):
        run = functools.partial(k, *(tensors[n] for n in fused.args))
        run()
        got = [tensors[n] for n in fused.outputs]
        if not all(_close(g, e) for g, e in zip(got, expected)):
            return None, f"tile {_tile_text(tiles[i])} disagreed with the extern product: kept"
        fns[str(i)] = run
    times = time_min(fns, budget_s=0.05, calls=10, sync=torch.cuda.synchronize)
    best = min((k for k in times if k != "extern"), key=times.__getitem__)
    tile = tiles[int(best)]
    us = (
        f"template {times[best] * 1e6:.1f} us at {_tile_text(tile)}, "
        f"extern and kernel {times['extern'] * 1e6:.1f} us"
    )
    if times[best] <= FASTER * times["extern"]:
        return tile.items(), us
    return None, f"not faster: {us}"


def _tile_text(tile: Tile) -> str:
    return (
        f"{tile.block_m}x{tile.block_n}x{tile.block_k} ({tile.num_warps} warps, "
        f"{tile.num_stages} stages)"
    )


def _close(got: torch.Tensor, expected: torch.Tensor) -> bool:
    """The fused kernel's output against the unfused pair's: their products differ only in the
    order of the float32 sums, which rounding to 16 bits may show as one unit in the last place."""
    if not got.dtype.is_floating_point:
        return bool(torch.equal(got, expected))
    g, e = got.float(), expected.float()
    scale = float(e.abs().max()) if e.numel() else 0.0
    return bool(torch.allclose(g, e, rtol=2e-2, atol=2e-2 * scale + 1e-6, equal_nan=True))
