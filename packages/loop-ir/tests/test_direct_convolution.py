"""lowering/convolution.py: ``torchkiln::conv_direct`` as pointwise loop IR summing its taps,
against ATen's convolution on fresh random inputs, for every grouping the lowering takes (the
channels-last pass sends it depthwise convolutions only; a grouped or 3-channel one is lowered
the same way), strides, paddings past one edge only, dilations and input layouts; and the taps'
cache (a weight laid out (C_in per group, kh, kw, C_out) once per change of the tensor)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchkiln_loop_ir import channels_last as CL

CONV_DIRECT = torch.ops.torchkiln.conv_direct.default
CONV_TAPS = torch.ops.torchkiln.conv_taps.default

CASES = [
    # (C_in, C_out, kernel, stride, padding, dilation, groups)
    (8, 8, (3, 3), (1, 1), (1, 1), (1, 1), 8),  # depthwise 3x3
    (6, 6, (5, 5), (2, 2), (2, 2), (1, 1), 6),  # depthwise 5x5, stride 2
    (4, 8, (3, 3), (1, 1), (2, 2), (2, 2), 4),  # a channel multiplier of 2, dilated
    (8, 4, (3, 1), (1, 2), (1, 0), (1, 1), 2),  # grouped (4 input channels a group), not square
    (3, 5, (3, 3), (2, 2), (0, 1), (1, 1), 1),  # a 3-channel stem, padding on one axis only
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}to{c[1]}k{c[2][0]}{c[2][1]}g{c[6]}")
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_direct_convolution_equals_aten(check, case, channels_last):
    cin, cout, kernel, stride, padding, dilation, groups = case
    x = torch.randn(2, cin, 11, 9)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(cout, cin // groups, *kernel)

    def f(x, w):
        taps = CONV_TAPS(w)
        return CONV_DIRECT(x, taps, list(stride), list(padding), list(dilation), groups)

    cg = check(f, x, w, atol=1e-5, rtol=1e-5)
    assert not cg.fallbacks, cg.fallbacks
    expected = F.conv2d(x, w, None, stride, padding, dilation, groups)
    torch.testing.assert_close(cg(x, w)[0], expected, atol=1e-5, rtol=1e-5)


def test_the_taps_layout_and_cache():
    w = torch.randn(6, 2, 3, 5)
    taps = CL._conv_taps(w)
    assert taps.shape == (2, 3, 5, 6) and taps.is_contiguous()
    assert torch.equal(taps, w.permute(1, 2, 3, 0))
    assert CL._conv_taps(w) is taps  # kept while the tensor is unchanged
    with torch.no_grad():
        w.mul_(2)
    again = CL._conv_taps(w)
    assert again is not taps and torch.equal(again, w.permute(1, 2, 3, 0))


def test_the_taps_are_never_written_over(compile_fn):
    """The cached taps are not storage the graph owns: a kernel reading them at the index it
    writes, as they die there, would write its output over them (loop-ir 0.8.7's in-place reuse)
    and so over the cache, and the second call would read the first call's output as taps."""
    w = torch.randn(5, 1, 1, 1)

    def f(w):
        return CONV_TAPS(w) * 2 + 1

    cg = compile_fn(f, w)
    expected = w.permute(1, 2, 3, 0) * 2 + 1
    for _ in range(3):
        torch.testing.assert_close(cg(w)[0], expected)
    torch.testing.assert_close(CL._conv_taps(w), w.permute(1, 2, 3, 0))


def test_a_pointwise_input_is_computed_once_not_per_tap(check):
    """The convolution's input, a pointwise value (an expand convolution's bias and SiLU), is
    realized: inlined, each output element would recompute it at all 25 taps, exp included."""
    x, b, w = torch.randn(2, 6, 9, 9), torch.randn(6, 1, 1), torch.randn(6, 1, 5, 5)

    def f(x, b, w):
        y = F.silu(x + b)
        return CONV_DIRECT(y, CONV_TAPS(w), [1, 1], [2, 2], [1, 1], 6)

    cg = check(f, x, b, w, atol=1e-5, rtol=1e-5)
    reasons = [getattr(n, "reason", "") for n in cg.graph_ir.nodes]
    assert any(r.startswith("direct convolution input") for r in reasons), reasons
    assert cg.schedule_text().count("sigmoid") == 1, cg.schedule_text()


def test_conv_depthwise_without_a_kernel_is_atens_with_the_fake_strides():
    """``torchkiln::conv_depthwise`` on a device no code generator registered a kernel for:
    ATen's convolution with the bias, channels-last with the strides of its fake result (a
    (N, C, 1, 1) output included), so the wrapper's layout check copies nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    conv_depthwise = torch.ops.torchkiln.conv_depthwise.default
    for size, kernel, padding in ((9, 7, 3), (3, 3, 0)):
        x = torch.randn(2, 6, size, size).contiguous(memory_format=torch.channels_last)
        w, b = torch.randn(6, 1, kernel, kernel), torch.randn(6)
        assert CL.depthwise_kernel("cpu") is None
        got = conv_depthwise(x, CL._conv_taps(w), b, [padding, padding])
        expected = F.conv2d(x, w, b, padding=padding, groups=6)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fake = conv_depthwise(
                mode.from_tensor(x), mode.from_tensor(CL._conv_taps(w)), b, [padding, padding]
            )
        assert got.stride() == fake.stride() and got.shape == fake.shape
