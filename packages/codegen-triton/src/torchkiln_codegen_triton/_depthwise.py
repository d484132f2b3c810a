"""A depthwise convolution kernel over strips of output pixels: ``torchkiln::conv_depthwise``.

loop-ir sends an inference graph's depthwise convolutions of stride 1 with more taps than its
direct (pointwise) convolution takes, ConvNeXt's 7x7s (and with "always" a training step's,
and in its backward their input gradients: the output gradient convolved by the flipped taps),
to the kernel a code generator registers for the device
(``channels_last.register_depthwise_kernel``); this is codegen-triton's, for CUDA. cuDNN's
bf16 7x7 took 1.25 ms of ConvNeXt-tiny's 4.18 ms of kernel time at batch 64 on an H100
(session 45), about 7.6 times what its bytes need.

Why strips: a kernel that sums an output element's taps (loop-ir's direct convolution, or the
tiled one in ``benchmarks/gpu_dwconv_probe.py``) loads and converts every input value once per
tap that reads it, 49 times for a 7x7, and that work, not the bytes, bounds it (the tiled kernel
took 328 us in bf16 and 355 in float32 on ConvNeXt's first 7x7, where cuDNN took 201 and 423).
Here a program takes ``BLOCK_R`` strips of ``WS`` neighbouring output pixels of a row, times
``BLOCK_C`` channels: for each kernel row it loads the ``WS + kw - 1`` input pixels the strip
reads, each once, and adds each into the up to ``kw`` outputs it touches; the row's ``kw``
weights are loaded once. Loads and conversions per output fall from ``kh * kw`` to
``kh * (WS + kw - 1) / WS`` (about 13 against 49 for a 7x7 at ``WS`` 7). Triton has no shifted
view of a tensor held in registers, so a kernel row's work is unrolled in the kernel's text: one
accumulator a pixel of the strip, each loaded input pixel added into its outputs by name; the
kernel rows are a loop (``UNROLL_ROWS``).

Measured on an H100 (session 46, ``benchmarks/gpu_dwconv_probe.py``, ConvNeXt-tiny's four 7x7
shapes at batch 64, one of each, the best configuration swept, rows unrolled): cuDNN 409 us
against 260 in bf16, 836 against 255 in float32; the whole model's inference 6.1% (bf16) and
7.3% (float32) faster than with cuDNN's (``gpu_options_ab.py``).

Inputs (the registration's contract): ``x`` (N, C, H, W) channels-last; ``taps`` (1, kh, kw, C)
contiguous (loop-ir's ``conv_taps``); ``bias`` (C,) or None; ``padding`` (ph, pw). The sums are
in float32; the output is channels-last in ``x``'s dtype.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
from torchkiln_loop_ir.codecache import CodeCache, source_module

from ._template import device_sms
from .wrapper import _misaligned, _relaunch, stream_for

#: channels a program takes (contiguous in memory) and its warps
BLOCK_C = 32
WARPS = 4
#: strips a program takes at most, by the input's bytes a value: on an H100 (session 46,
#: ``gpu_dwconv_probe.py``, ConvNeXt-tiny's 7x7s at batch 64) 32 ran bfloat16 best at 56x56
#: (123 us) and within 4% at 28x28; float32 ran best at 16 on three of the four shapes, and at
#: 56x56 and 28x28 26-31% faster than at 32 (122 against 165 us at 56x56)
MAX_BLOCK_R = {2: 32, 4: 16}
#: fewer strips where the grid would not give each SM two programs (a batch of one), down to
MIN_BLOCK_R = 8
#: the kernel rows as a loop (False) or unrolled in the text. Compiled for sm_90 on the CPU
#: machine (``benchmarks/triton_kernel_resources.py --strip``, session 46) the unrolled kernel
#: took 11.6 s in bf16 and 10.0 s in float32 against 0.9 and 0.9 as a loop, with as many or
#: fewer instructions as a loop (813 against 755 an output in bf16, 984 against 753 in
#: float32), no shared memory either way (the loop is not pipelined), and 190 / 255 registers
#: against 208 / 142 (ConvNeXt's first 7x7 at the configuration picked, 64-bit pixel offsets).
#: The per-kernel timings above are of the unrolled kernel. As a loop, ConvNeXt-tiny's bf16
#: inference ran 1.076x as fast as with cuDNN's (session 47, H100, ``gpu_options_ab.py``),
#: against the unrolled form's 1.061 (session 46).
UNROLL_ROWS = False


def strip_width(ow: int) -> int:
    """Output pixels a strip takes: 7 where the width is a multiple of it (ConvNeXt's 56, 28, 14
    and 7: no strip runs past the row's end), else 8, or the whole row when it is narrower."""
    if ow % 7 == 0:
        return 7
    return min(8, ow)


def launch_config(
    n: int, c: int, oh: int, ow: int, sms: int, dtype: torch.dtype
) -> tuple[int, int, int, int]:
    """(BLOCK_R, BLOCK_C, num_warps, WS) for an output of (n, c, oh, ow) in ``dtype``:
    ``MAX_BLOCK_R`` strips a program, halved (down to ``MIN_BLOCK_R``) while the grid gives
    fewer than two programs a multiprocessor."""
    ws = strip_width(ow)
    strips = n * oh * triton.cdiv(ow, ws)
    channel_blocks = triton.cdiv(c, BLOCK_C)
    block_r = MAX_BLOCK_R.get(dtype.itemsize, 16)
    while block_r > MIN_BLOCK_R and triton.cdiv(strips, block_r) * channel_blocks < 2 * sms:
        block_r //= 2
    return block_r, BLOCK_C, WARPS, ws


def source(
    kh: int, kw: int, ph: int, pw: int, ws: int, bias: bool, unroll_rows: bool = False
) -> str:
    """The kernel's module text for a kh x kw kernel, padding (ph, pw), strips of ``ws``; the
    kernel rows unrolled (``tl.static_range``) or, with ``unroll_rows`` False, a loop."""
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        "",
        "@triton.jit",
        "def conv_depthwise(x_ptr, w_ptr, b_ptr, y_ptr, R, H, W, C, OH, OW, NWS,",
        "                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):",
        "    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)",
        "    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)",
        "    rmask = r < R",
        "    cmask = c < C",
        f"    ow0 = (r % NWS) * {ws}",
        "    t = r // NWS",
        "    oh = t % OH",
        "    n = t // OH",
    ]
    lines += [f"    acc{k} = tl.zeros([BLOCK_R, BLOCK_C], tl.float32)" for k in range(ws)]
    lines += [
        f"    for i in {'tl.static_range' if unroll_rows else 'range'}({kh}):",
        f"        h = oh + (i - {ph})",
        "        hok = rmask & (h >= 0) & (h < H)",
        # pixel offsets in 64 bits: N * H * W may pass 2**31 where r and c do not
        "        base = (n.to(tl.int64) * H + h) * W",
    ]
    lines += [
        f"        w{j} = tl.load(w_ptr + (i * {kw} + {j}) * C + c, mask=cmask, other=0.0)"
        ".to(tl.float32)[None, :]"
        for j in range(kw)
    ]
    for col in range(ws + kw - 1):
        lines += [
            f"        x = ow0 + {col - pw}",
            "        ok = hok & (x >= 0) & (x < W)",
            "        v = tl.load(x_ptr + ((base + x) * C)[:, None] + c[None, :],"
            " mask=ok[:, None] & cmask[None, :], other=0.0).to(tl.float32)",
        ]
        lines += [f"        acc{k} += v * w{col - k}" for k in range(ws) if 0 <= col - k < kw]
    if bias:
        lines.append("    bias = tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)[None, :]")
    lines.append("    row = (n.to(tl.int64) * OH + oh) * OW")
    for k in range(ws):
        value = f"acc{k} + bias" if bias else f"acc{k}"
        lines += [
            f"    ow = ow0 + {k}",
            "    tl.store(y_ptr + ((row + ow) * C)[:, None] + c[None, :],"
            f" ({value}).to(y_ptr.dtype.element_ty),"
            " mask=(rmask & (ow < OW))[:, None] & cmask[None, :])",
        ]
    return "\n".join(lines) + "\n"


@functools.cache
def kernel(kh: int, kw: int, ph: int, pw: int, ws: int, bias: bool, unroll_rows: bool) -> Any:
    """The Triton function for these sizes, through the code cache (Triton reads a kernel's
    source from its file)."""
    module, _ = source_module(
        CodeCache.at("triton"),
        source(kh, kw, ph, pw, ws, bias, unroll_rows),
        "kernel.py",
        "torchkiln_triton_depthwise_",
        register=True,
    )
    return module.conv_depthwise


class _Launch:
    """One shape's launch: the Triton function, its grid and parameters, worked out once
    (``_LAUNCHES``), and, once a call on CUDA whose tensors were all 16-byte aligned compiled
    it, that binary's direct relaunch (``wrapper._relaunch``: Triton's C launcher, as the
    generated kernels' ready launch), so a later such call skips ``fn[grid]``'s argument
    binding and specialization key. (Session 47 put the strip kernel's training step 2.8 ms of
    host time behind cuDNN's on an H100, 36 launches a step through ``fn[grid]``.)"""

    __slots__ = ("fn", "grid", "size", "ints", "consts", "warps", "ready")

    def __init__(
        self, x: torch.Tensor, taps: torch.Tensor, padding: Any, bias: bool, config: Any
    ) -> None:
        n, c, h, w = x.shape
        _, kh, kw, _ = taps.shape
        ph, pw = padding
        oh, ow = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
        sms = device_sms() if x.device.type == "cuda" else 1
        block_r, block_c, warps, ws = config or launch_config(n, c, oh, ow, sms, x.dtype)
        nws = triton.cdiv(ow, ws)
        strips = n * oh * nws
        self.fn = kernel(kh, kw, ph, pw, ws, bias, UNROLL_ROWS)
        self.grid = (triton.cdiv(strips, block_r), triton.cdiv(c, block_c))
        self.size = (n, c, oh, ow)
        #: the kernel's ints after its four tensors: R, H, W, C, OH, OW, NWS
        self.ints = (strips, h, w, c, oh, ow, nws)
        self.consts = {"BLOCK_R": block_r, "BLOCK_C": block_c}
        self.warps = warps
        self.ready: Any = None

    def __call__(self, tensors: tuple[torch.Tensor, ...], stream: Any) -> None:
        """Launch on ``tensors`` (x, taps, bias or taps, y): directly when ``stream`` (the
        current CUDA stream, ``wrapper.stream_for``; None on the CPU, under a launch hook, or
        for a configuration given by hand) and a ready binary allow it, else through Triton,
        keeping the binary it compiled for aligned tensors."""
        aligned = stream is not None and not _misaligned(tensors[:3])  # y is fresh: aligned
        if aligned and self.ready is not None:
            self.ready(stream, *tensors)
            return
        compiled = self._slow(*tensors)
        if aligned and hasattr(compiled, "packed_metadata"):
            tail = (*self.ints, *self.consts.values())
            self.ready = _relaunch(compiled, self.grid, tail, self._slow)

    def _slow(self, *tensors: torch.Tensor) -> Any:
        """Triton's own launch (``fn[grid](...)``); the binary it ran, where it returns one."""
        return self.fn.run(
            *tensors, *self.ints, grid=self.grid, warmup=False, num_warps=self.warps, **self.consts
        )


#: each shape's launch, by the input's shape, dtype and device, the taps' shape and dtype, the
#: padding and the bias's dtype (None without one): worked out once, not on every call
_LAUNCHES: dict[tuple[Any, ...], _Launch] = {}


def conv_depthwise(
    x: torch.Tensor,
    taps: torch.Tensor,
    bias: torch.Tensor | None,
    padding: Any,
    config: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:
    """The depthwise convolution (stride 1) of channels-last ``x`` by ``taps`` (1, kh, kw, C),
    plus ``bias``, channels-last; ``config`` (BLOCK_R, BLOCK_C, num_warps, WS) overrides
    ``launch_config`` (benchmarks: always launched through Triton)."""
    x = x.contiguous(memory_format=torch.channels_last)  # the layout the kernel indexes
    if bias is not None:
        bias = bias.contiguous()
    device = x.device
    if config is None:
        key = (
            x.shape,
            x.dtype,
            device,
            taps.shape,
            taps.dtype,
            tuple(padding),
            None if bias is None else bias.dtype,
        )
        launch = _LAUNCHES.get(key)
        if launch is None:
            launch = _LAUNCHES.setdefault(key, _Launch(x, taps, padding, bias is not None, None))
        stream = stream_for(device)
    else:
        launch, stream = _Launch(x, taps, padding, bias is not None, config), None
    y = torch.empty(launch.size, dtype=x.dtype, device=device, memory_format=torch.channels_last)
    if y.numel() == 0:  # an empty batch: no program to launch
        return y
    launch((x, taps, bias if bias is not None else taps, y), stream)
    return y
