"""_depthwise.py: the strip kernel of ``torchkiln::conv_depthwise`` against a float64 reference
on fresh random inputs (kernel sizes, paddings, widths that are and are not multiples of the
strip, channels that fill no block, with and without a bias, float32 and bfloat16), and the
launch configuration it picks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchkiln_codegen_triton import _depthwise as D
from torchkiln_loop_ir import channels_last as CL

CASES = [
    # (N, C, H, W, kernel, padding, bias)
    (2, 40, 9, 10, (7, 7), (3, 3), True),  # ConvNeXt's 7x7, a width of no whole strips
    (1, 24, 5, 5, (7, 7), (3, 3), False),  # every tap past some edge
    (2, 8, 14, 14, (7, 7), (3, 3), True),  # two strips of 7 a row
    (2, 16, 10, 11, (5, 5), (1, 2), True),  # not square padding, a smaller output
    (1, 33, 13, 6, (3, 5), (1, 2), True),  # not a square kernel; C past one block
]


def _reference(x, taps, bias, padding):
    weight = taps.permute(3, 0, 1, 2).double()
    b = None if bias is None else bias.double()
    return F.conv2d(x.double(), weight, b, padding=padding, groups=x.shape[1])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"c{c[1]}_{c[2]}x{c[3]}_k{c[4][0]}{c[4][1]}")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_strip_kernel_equals_the_reference(case, dtype):
    n, c, h, w, (kh, kw), padding, with_bias = case
    x = torch.randn(n, c, h, w).to(dtype=dtype, memory_format=torch.channels_last)
    taps = (torch.randn(1, kh, kw, c) / kh).to(dtype)
    bias = torch.randn(c).to(dtype) if with_bias else None
    got = D.conv_depthwise(x, taps, bias, padding)
    expected = _reference(x, taps, bias, padding)
    assert got.shape == expected.shape and got.dtype == dtype
    assert got.is_contiguous(memory_format=torch.channels_last)
    # float32: sums in float32; bfloat16: the float32 sum rounded once (the interpreter
    # truncates: up to a whole bf16 ulp of the largest output)
    bound = 2.0**-7 if dtype == torch.bfloat16 else 1e-6
    scale = expected.abs().max().item()
    assert (got.double() - expected).abs().max().item() <= bound * scale


def test_an_nchw_input_is_read_in_its_own_layout():
    x = torch.randn(2, 8, 9, 9)  # contiguous NCHW: the kernel makes it channels-last first
    taps, bias = torch.randn(1, 7, 7, 8), torch.randn(8)
    torch.testing.assert_close(
        D.conv_depthwise(x, taps, bias, (3, 3)).double(),
        _reference(x, taps, bias, (3, 3)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_an_empty_batch():
    x = torch.randn(0, 8, 9, 9).to(memory_format=torch.channels_last)
    got = D.conv_depthwise(x, torch.randn(1, 7, 7, 8), torch.randn(8), (3, 3))
    assert got.shape == (0, 8, 9, 9)


def test_each_strip_configuration_gives_the_same_result():
    x = torch.randn(1, 48, 14, 14).to(memory_format=torch.channels_last)
    taps, bias = torch.randn(1, 7, 7, 48), torch.randn(48)
    expected = _reference(x, taps, bias, (3, 3))
    for config in ((8, 32, 4, 7), (16, 16, 2, 4), (8, 64, 4, 8), (16, 32, 4, 1)):
        got = D.conv_depthwise(x, taps, bias, (3, 3), config)
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_launch_config():
    bf16, fp32 = torch.bfloat16, torch.float32
    # strips of 7 where the width is a multiple of 7, else 8, or the whole narrower row
    assert [D.strip_width(w) for w in (56, 28, 14, 7, 32, 10, 5)] == [7, 7, 7, 7, 8, 8, 5]
    # ConvNeXt-tiny's first 7x7 at batch 64 fills an H100 (132 SMs) at the largest block: 32
    # strips in 16-bit, 16 in float32 (session 46's sweep)
    assert D.launch_config(64, 96, 56, 56, 132, bf16) == (32, D.BLOCK_C, D.WARPS, 7)
    assert D.launch_config(64, 96, 56, 56, 132, fp32) == (16, D.BLOCK_C, D.WARPS, 7)
    # at batch 1 the blocks shrink until each SM has two programs, or to the smallest
    block_r, *_ = D.launch_config(1, 96, 56, 56, 132, bf16)  # 448 strips x 3 channel blocks
    assert block_r == 8
    block_r, *_ = D.launch_config(1, 768, 7, 7, 132, fp32)  # 7 strips x 24 channel blocks
    assert block_r == D.MIN_BLOCK_R
    block_r, *_ = D.launch_config(4, 96, 56, 56, 132, bf16)  # 1792 strips: 32 gives 168 programs
    assert block_r == 16


def test_a_launch_is_worked_out_once_per_shape():
    x = torch.randn(1, 16, 9, 9).to(memory_format=torch.channels_last)
    taps, bias = torch.randn(1, 7, 7, 16), torch.randn(16)
    D._LAUNCHES.clear()
    first = D.conv_depthwise(x, taps, bias, (3, 3))
    assert len(D._LAUNCHES) == 1
    again = D.conv_depthwise(torch.randn_like(x), taps, bias, (3, 3))
    assert len(D._LAUNCHES) == 1 and again.shape == first.shape
    D.conv_depthwise(x, taps, None, (3, 3))  # no bias: another kernel
    D.conv_depthwise(x[:, :, :7], taps, bias, (3, 3))  # another shape
    assert len(D._LAUNCHES) == 3


def test_the_kernel_is_registered_for_cuda():
    """Importing the backend registers the kernel for CUDA (loop-ir's ``depthwise_convolutions``
    "auto" then sends large depthwise convolutions to it), and for no other device."""
    import torchkiln_codegen_triton.backend  # noqa: F401

    assert CL.depthwise_kernel("cuda") is D.conv_depthwise
    assert CL.depthwise_kernel("cpu") is None
    assert CL.depthwise_kernel(None) is None


def _fake_cuda_launches(monkeypatch):
    """The strip kernel's launches on CPU tensors as on CUDA: ``stream_for`` gives a stream, the
    Triton function is a ``FakeFn`` (its ``calls`` are launches through Triton, its compiled
    kernel's ``runs`` the direct relaunches)."""
    from _fake_launch import FakeFn

    fn = FakeFn()
    monkeypatch.setattr(D, "kernel", lambda *sizes: fn)
    monkeypatch.setattr(D, "stream_for", lambda device: "stream")
    D._LAUNCHES.clear()
    return fn


def test_aligned_calls_relaunch_the_binary_triton_compiled(monkeypatch):
    """The first call goes through Triton and keeps the binary; later calls with aligned
    tensors hand Triton's C launcher the same grid, tensors, ints and constexprs directly. A
    misaligned input (a view at an odd offset) goes through Triton again, as does a launch
    configuration given by hand."""
    fn = _fake_cuda_launches(monkeypatch)
    x = torch.randn(2, 40, 9, 10).to(memory_format=torch.channels_last)
    taps, bias = torch.randn(1, 7, 7, 40), torch.randn(40)
    for _ in range(3):
        D.conv_depthwise(x, taps, bias, (3, 3))
    ((params, grid, warps, consts),) = fn.calls
    assert len(fn.compiled.runs) == 2 and len(grid) == 2
    sms = D.device_sms() if x.device.type == "cuda" else 1  # (the GPU smoke run: CUDA)
    block_r, block_c, want_warps, ws = D.launch_config(2, 40, 9, 10, sms, torch.float32)
    assert (warps, consts) == (want_warps, {"BLOCK_R": block_r, "BLOCK_C": block_c})
    for run in fn.compiled.runs:
        assert run[:9] == (*grid, 1, "stream", "function", "metadata", None, None, None)
        tensors, rest = run[9:13], run[13:]
        assert tensors[:3] == (x, taps, bias) and tensors[3].shape == (2, 40, 9, 10)
        assert rest == (*params[4:], block_r, block_c)
        assert params[4:] == (2 * 9 * 2, 9, 10, 40, 9, 10, 2)  # R, H, W, C, OH, OW, strips a row
    misaligned = torch.randn(x.numel() + 1)[1:].view(2, 9, 10, 40).permute(0, 3, 1, 2)
    assert misaligned.data_ptr() % 16 and misaligned.is_contiguous(
        memory_format=torch.channels_last
    )
    D.conv_depthwise(misaligned, taps, bias, (3, 3))
    D.conv_depthwise(x, taps, bias, (3, 3), (8, 32, 4, 7))
    assert len(fn.calls) == 3 and len(fn.compiled.runs) == 2


def test_no_stream_launches_through_triton(monkeypatch):
    """Without a stream (a CPU tensor, a launch hook installed: ``wrapper.stream_for``) every
    launch goes through Triton and no binary is kept."""
    fn = _fake_cuda_launches(monkeypatch)
    monkeypatch.setattr(D, "stream_for", lambda device: None)
    x = torch.randn(1, 8, 9, 9).to(memory_format=torch.channels_last)
    for _ in range(2):
        D.conv_depthwise(x, torch.randn(1, 7, 7, 8), None, (3, 3))
    assert len(fn.calls) == 2 and not fn.compiled.runs
    assert all(launch.ready is None for launch in D._LAUNCHES.values())


def test_repeated_calls_equal_the_reference():
    """The same shape called again (on CUDA, the gpu smoke run: through the kept binary) on
    fresh inputs, and a bfloat16 bias with float32 taps (another launch: the key has both
    dtypes)."""
    for bias_dtype in (torch.float32, torch.float32, torch.bfloat16):
        x = torch.randn(2, 40, 14, 14).to(memory_format=torch.channels_last)
        taps, bias = torch.randn(1, 7, 7, 40) / 7, torch.randn(40).to(bias_dtype)
        torch.testing.assert_close(
            D.conv_depthwise(x, taps, bias, (3, 3)).double(),
            _reference(x, taps, bias, (3, 3)),
            rtol=1e-5,
            atol=1e-5,
        )
