"""Device-filling split reductions (lowering/split_reductions.py): batch-norm statistics (var_mean
and sums over N, H, W per channel) in NCHW and channels-last, split into [split, C] partials and
combined, against eager on fresh random inputs; and the rule itself (when, how much, which
backend)."""

from __future__ import annotations

import pytest
import sympy
import torch
import torch.nn.functional as F
import torchkiln_loop_ir as L
from torchkiln_loop_ir.ir import Reduction, product
from torchkiln_loop_ir.lowering.split_reductions import is_column_reduction, split_factor
from torchkiln_loop_ir.ops import ops

# a GPU-sized target on small tensors: the interpreter and the reference backend stay fast
SPLIT = L.LoopIROptions(split_programs=256)
SHAPE = (16, 64, 32, 32)


def _input(dtype, channels_last, shape=SHAPE):
    x = torch.randn(shape).to(dtype) * 2 + 3
    return x.to(memory_format=torch.channels_last) if channels_last else x


def _bn_stats(x):
    return torch.var_mean(x.float(), (0, 2, 3), correction=0)


def _bn_backward_sums(g, x, mean):
    gf, xf = g.float(), x.float()
    return gf.sum((0, 2, 3)), (gf * (xf - mean[None, :, None, None])).sum((0, 2, 3))


def _reductions(cg):
    return [(k.xranges, k.rranges) for k in cg.kernel_specs if k.rranges]


LAYOUTS = [pytest.param(False, id="nchw"), pytest.param(True, id="channels_last")]
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.bfloat16, id="bf16")]


@pytest.mark.parametrize("channels_last", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_statistics_are_split_and_match_eager(check, dtype, channels_last):
    x = _input(dtype, channels_last)
    cg = check(_bn_stats, x, options=SPLIT, atol=1e-4, rtol=1e-5)
    text = cg.schedule_text()
    assert "welford_combine" in text and "welford_reduce" in text
    shapes = _reductions(cg)
    # the partials are [split, 64] (split first: C stays the contiguous dim), combined over split
    split = 128 if channels_last else 2
    assert any(tuple(xr) == (split, 64) for xr, _ in shapes), shapes
    assert any(tuple(xr) == (64,) and tuple(rr) == (split,) for xr, rr in shapes), shapes


@pytest.mark.parametrize("channels_last", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_norm_training_forward_and_backward_sums_match_eager(check, dtype, channels_last):
    x = _input(dtype, channels_last)
    w, b = torch.randn(64), torch.randn(64)
    g = _input(dtype, channels_last)
    mean = torch.randn(64)

    def fn(x, w, b, g, mean):
        y = F.batch_norm(x.float(), None, None, w, b, training=True)
        return (y, *_bn_backward_sums(g, x, mean))

    cg = check(fn, x, w, b, g, mean, options=SPLIT, atol=2e-4, rtol=1e-4)
    assert "welford_combine" in cg.schedule_text()
    # the backward's two sums: partials over [split, C], each finished over split
    assert sum(len(rr) == 1 and tuple(xr) == (64,) for xr, rr in _reductions(cg)) >= 2


def test_batch_norm_backward_through_autograd_matches_eager(check):
    x = _input(torch.float32, True)
    w, b = torch.randn(64), torch.randn(64)
    g = torch.randn(SHAPE)

    def fn(x, w, b, g):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = F.batch_norm(x, None, None, w, b, training=True)
        return torch.autograd.grad(y, (x, w, b), g)

    # grad_weight sums 16384 products that cancel to ~100: float32 re-association moves it ~1e-3
    cg = check(fn, x, w, b, g, options=SPLIT, atol=2e-3, rtol=1e-4)
    assert "welford_combine" in cg.schedule_text()


def test_default_cpu_backend_keeps_one_pass(check):
    """No split target on a CPU backend: the statistics stay one Welford pass per channel."""
    x = _input(torch.float32, True)
    cg = check(_bn_stats, x, atol=1e-4, rtol=1e-5)
    assert "welford_combine" not in cg.schedule_text()
    assert [tuple(xr) for xr, _ in _reductions(cg)] == [(64,)]


def _welford(shape, stride, dims=(0, 2, 3)):
    """A welford_reduce over ``dims`` of a tensor of ``shape``/``stride`` (as lowering builds it)."""
    kept = [d for d in range(len(shape)) if d not in dims]

    def inner(index, rindex):
        full = [0] * len(shape)
        for d, v in zip(kept, index):
            full[d] = v
        for d, v in zip(dims, rindex):
            full[d] = v
        return ops.load("x", sum(i * s for i, s in zip(full, stride)))

    return Reduction(
        inner,
        tuple(sympy.Integer(shape[d]) for d in kept),
        tuple(sympy.Integer(shape[d]) for d in dims),
        "welford_reduce",
        torch.float32,
        torch.float32,
        torch.device("cuda"),
    )


def _nchw(n, c, h, w):
    return _welford((n, c, h, w), (c * h * w, h * w, w, 1))


def _nhwc(n, c, h, w):
    return _welford((n, c, h, w), (h * w * c, 1, w * c, c))


H200 = 4 * 132


def test_rule_fills_an_h200_for_resnet50_statistics():
    # NCHW: one program per channel, split until the grid holds 2-4 programs per SM
    assert not is_column_reduction(_nchw(64, 64, 112, 112))
    assert split_factor(_nchw(64, 64, 112, 112), H200) == 8  # 512 programs of 100352 values
    assert split_factor(_nchw(64, 256, 56, 56), H200) == 2
    # channels-last: a column reduction, 64 channels a program: split much further
    assert is_column_reduction(_nhwc(64, 64, 112, 112))
    assert split_factor(_nhwc(64, 64, 112, 112), H200) == 512  # 1568 rows x 64 channels each
    assert split_factor(_nhwc(64, 256, 56, 56), H200) == 128
    assert split_factor(_nhwc(64, 2048, 7, 7), H200) == 16
    assert split_factor(_nchw(64, 512, 28, 28), H200) == 0  # 512 programs: ~4 per SM already
    # enough outputs already: no split
    assert split_factor(_nchw(64, 1024, 14, 14), H200) == 0
    assert split_factor(_nchw(64, 2048, 7, 7), H200) == 0


def test_rule_keeps_small_or_cpu_reductions_whole():
    assert split_factor(_nchw(64, 64, 112, 112), 0) == 0  # a CPU backend: no device to fill
    assert split_factor(_nhwc(64, 64, 112, 112), 0) == 0
    assert split_factor(_nchw(2, 64, 8, 8), H200) == 0  # 128 values a channel: too few
    # a length with no power-of-two factor cannot be cut into equal chunks
    assert split_factor(_nchw(1, 64, 49, 49), H200) == 0
    # symbolic sizes: one pass, as before
    red = _nchw(64, 64, 112, 112)
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    sym = Reduction(
        red.inner_fn,
        red.ranges,
        (s0, *red.reduction_ranges[1:]),
        red.reduction_type,
        red.dtype,
        red.src_dtype,
        red.device,
    )
    assert split_factor(sym, H200) == 0


def _combines(graph_ir):
    return sum(
        isinstance(getattr(n, "data", None), Reduction)
        and n.data.reduction_type == "welford_combine"
        for n in graph_ir.nodes
    )


def test_backend_capability_and_option_decide_the_target(trace):
    x = _input(torch.float32, False)
    gm = trace(_bn_stats, x)
    gpu_like = L.BackendCapabilities(reduction_broadcast_reduction=True, parallel_programs=256)
    # the backend's capabilities reach lowering through lower(); without them, a CPU tensor's
    # device asks for no split
    assert _combines(L.lower(gm, [x], L.LoopIROptions(), gpu_like)) == 2  # mean and m2
    assert _combines(L.lower(gm, [x], L.LoopIROptions())) == 0
    # the option overrides the backend's: 0 turns the device-filling split off
    assert _combines(L.lower(gm, [x], L.LoopIROptions(split_programs=0), gpu_like)) == 0
    with pytest.raises(ValueError, match="split_programs"):
        L.LoopIROptions(split_programs=-1)


def test_row_and_split_column_reductions_of_equal_sizes_stay_apart(check):
    """A layer norm backward over 512 rows of 64: the weight gradient's column sums split into 8
    chunks of 64 rows give partials over (8 * 64) x 64, the sizes of the row sums' kernel. One
    kernel's block layout coalesces only one of the two (the fused kernel read the column partials
    a cache line per value on the GPU: 9% of the bandwidth), so they are two kernels."""
    rows, width = 512, 64
    x, g, w = torch.randn(rows, width), torch.randn(rows, width), torch.randn(width)
    _, mean, rstd = torch.native_layer_norm(x, [width], w, w, 1e-5)

    def fn(g, x, mean, rstd, w):
        return torch.ops.aten.native_layer_norm_backward(
            g, x, [width], mean, rstd, w, w, [True, True, True]
        )

    cg = check(fn, g, x, mean, rstd, w, options=SPLIT, atol=1e-4, rtol=1e-4)
    shapes = _reductions(cg)
    assert any(tuple(xr) == (8, width) for xr, _ in shapes), shapes  # the column sums were split
    same_sizes = [
        k
        for k in cg.kernel_specs
        if k.rranges and (product(k.xranges), product(k.rranges)) == (rows, width)
    ]
    assert len(same_sizes) == 2, [(k.xranges, k.rranges) for k in cg.kernel_specs]
