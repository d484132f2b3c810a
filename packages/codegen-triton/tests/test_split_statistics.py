"""Batch-norm statistics split by loop-ir to fill the GPU (lowering/split_reductions.py), through
this backend under Triton's interpreter: var_mean and the backward's two sums over (N, H, W) per
channel, NCHW and channels-last, float32 and bfloat16, against eager on fresh random inputs; the
channels-last partials keep C the contiguous dim (transposed blocks, coalesced loads and stores)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torchkiln_codegen_triton import TritonBackend
from torchkiln_codegen_triton._compat import interpreting
from torchkiln_codegen_triton.backend import parallel_programs

loop_ir = pytest.importorskip("torchkiln_loop_ir")

# a GPU-sized split target on tensors small enough for the interpreter
SPLIT = loop_ir.LoopIROptions(split_programs=256)
SHAPE = (8, 64, 32, 32)
LAYOUTS = [pytest.param(False, id="nchw"), pytest.param(True, id="channels_last")]
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.bfloat16, id="bf16")]


def _input(dtype, channels_last):
    x = (torch.randn(SHAPE) * 2 + 3).to(dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _compile(fn, *inputs, options=SPLIT):
    gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
    return loop_ir.compile_graph(gm, list(inputs), TritonBackend(), options)


def _compare(cg, fn, inputs, **tol):
    got, expected = cg(*inputs), fn(*inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, **tol)


def _stats(x):
    return torch.var_mean(x.float(), (0, 2, 3), correction=0)


def _forward(x, w, b):
    return F.batch_norm(x.float(), None, None, w, b, training=True)


def _backward_sums(g, x, mean):
    """What batch norm's backward reduces per channel: sum(g) and sum(g * (x - mean))."""
    gf = g.float()
    return gf.sum((0, 2, 3)), (gf * (x.float() - mean[None, :, None, None])).sum((0, 2, 3))


def _partial_kernels(cg):
    """The kernels reducing chunks into [split, 64] partials."""
    return [
        (spec, k)
        for spec, k in zip(cg.kernel_specs, cg.kernels)
        if spec.rranges and len(spec.xranges) == 2 and int(spec.xranges[1]) == 64
    ]


@pytest.mark.parametrize("channels_last", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_split_statistics_match_eager(dtype, channels_last):
    x = _input(dtype, channels_last)
    cg = _compile(_stats, x)
    _compare(cg, _stats, (x,), atol=1e-4, rtol=1e-5)
    parts = _partial_kernels(cg)
    assert parts, [(s.xranges, s.rranges) for s in cg.kernel_specs]
    assert "welford_combine" in cg.schedule_text()
    for _, k in parts:
        # loop-ir's split, not this backend's second kernel
        assert not k.config.split
        # channels-last: the partial kernel's block runs along C, contiguous in the input and
        # in the [split, C] partials
        assert k.config.transposed == channels_last, k.source


def test_channels_last_partials_are_read_and_written_along_c():
    x = _input(torch.bfloat16, True)
    cg = _compile(_stats, x)
    (spec, k), *_ = _partial_kernels(cg)
    assert int(spec.xranges[0]) == 128  # split chunks of 64 rows
    src = k.source
    assert "block layout transposed" in src and "tl.arange(0, XBLOCK)[None, :]" in src
    # each partial is stored at its flat [split, C] position: consecutive lanes, consecutive C
    assert src.count("+ (xindex), ") == 3, src  # mean, m2, weight
    finish = [kk for s, kk in zip(cg.kernel_specs, cg.kernels) if s.rranges and len(s.xranges) == 1]
    assert finish and all(kk.config.transposed for kk in finish)
    assert all("(x0 + (64 * r0))" in kk.source for kk in finish)


@pytest.mark.parametrize("channels_last", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_training_forward_matches_eager(dtype, channels_last):
    x, w, b = _input(dtype, channels_last), torch.randn(64), torch.randn(64)
    cg = _compile(_forward, x, w, b)
    _compare(cg, lambda *a: (_forward(*a),), (x, w, b), atol=2e-4, rtol=1e-4)
    parts = _partial_kernels(cg)
    assert parts and all(k.config.transposed == channels_last for _, k in parts)


@pytest.mark.parametrize("channels_last", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_backward_sums_match_eager(dtype, channels_last):
    g, x, mean = _input(dtype, channels_last), _input(dtype, channels_last), torch.randn(64)
    cg = _compile(_backward_sums, g, x, mean)
    # sums of 8192 products that cancel: float32 re-association moves them ~1e-3
    _compare(cg, _backward_sums, (g, x, mean), atol=2e-3, rtol=1e-4)
    # both sums in one partial kernel (they share their reads), each finished over the chunks
    (spec, k), *more = _partial_kernels(cg)
    assert not more and sum(n.is_reduction for s in spec.stages for n in s.nodes) == 2
    assert k.config.transposed == channels_last and not k.config.split


@pytest.mark.skipif(
    not interpreting(),
    reason="about the interpreter's target of 0: on a GPU the backend asks for a split "
    "(parallel_programs() > 0), which test_codegen_triton_e2e.py tests",
)
def test_interpreter_asks_for_no_split_by_default():
    """Under the interpreter the backend's target is 0: the statistics stay one pass."""
    assert parallel_programs() == 0
    assert TritonBackend().capabilities.parallel_programs == 0
    x = _input(torch.float32, True)
    cg = _compile(_stats, x, options=loop_ir.LoopIROptions())
    _compare(cg, _stats, (x,), atol=1e-4, rtol=1e-5)
    assert "welford_combine" not in cg.schedule_text()


def _layer_norm_backward(width):
    def fn(g, x, mean, rstd, w):
        return torch.ops.aten.native_layer_norm_backward(
            g, x, [width], mean, rstd, w, w, [True, True, True]
        )

    return fn


@pytest.mark.parametrize(
    "width", [pytest.param(128, id="block-uniform"), pytest.param(96, id="not")]
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_backward_column_partials_read_each_rows_statistics_once(dtype, width):
    """A layer norm backward's weight and bias gradients split into column partials over
    (chunk, column) x rows: the chunk index is one value per block of columns when the block
    divides the width (128 = twice the outer reduction's XBLOCK of 64), and the per-row mean
    and 1/std are then read once per row ([RBLOCK, 1], masked by rows only), not once per
    (row, column) of the tile. A width the block does not divide keeps per-column indices."""
    rows = 1024
    x, g = (torch.randn(rows, width) * 2 + 1).to(dtype), torch.randn(rows, width).to(dtype)
    w = torch.randn(width).to(dtype)
    _, mean, rstd = torch.native_layer_norm(x, [width], w, w, 1e-5)
    fn = _layer_norm_backward(width)
    inputs = (g, x, mean, rstd, w)
    # the column partials as a kernel of their own (not in the row kernel: test_mixed_order.py)
    separate = loop_ir.LoopIROptions(split_programs=256, mixed_order_reductions=False)
    cg = _compile(fn, *inputs, options=separate)
    partials = [k for spec, k in zip(cg.kernel_specs, cg.kernels) if len(spec.xranges) == 2]
    assert partials, [(s.xranges, s.rranges) for s in cg.kernel_specs]  # the sums were split
    uniform = ["xoffset // " in k.source for k in partials]
    assert all(uniform) if width == 128 else not any(uniform), [k.source for k in partials]
    exact = [t.double() for t in fn(*(t.double() for t in inputs))]
    expected = fn(*inputs)
    for got, want, e in zip(cg(*inputs), expected, exact):
        # no further from float64 than twice eager's own error plus one rounding of the
        # output's dtype at the result's scale (bfloat16 column sums of 1024 rows: eager's
        # float32 sum may round to the nearer bfloat16 value where ours, summed in another
        # order, rounds to the other one; a 1e-5 step failed once in CI at 0.75 of a bf16 step)
        assert got.dtype == want.dtype
        ours, eagers = (got.double() - e).abs().max(), (want.double() - e).abs().max()
        step = max(1e-5, torch.finfo(got.dtype).eps)
        assert ours <= 2 * eagers + step * (1 + e.abs().max()), (ours, eagers)
