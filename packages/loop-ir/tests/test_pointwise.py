"""Pointwise lowerings against eager: odd sizes, broadcast, non-contiguous inputs, dtypes."""

from __future__ import annotations

import pytest
import torch

SIZES = [(1,), (7,), (3, 257)]


UNARY = [
    torch.exp,
    torch.sin,
    torch.tanh,
    torch.sigmoid,
    torch.relu,
    torch.abs,
    torch.neg,
    torch.floor,
    torch.erf,
    torch.sign,
    torch.nn.functional.gelu,
    torch.nn.functional.silu,
    torch.nn.functional.hardswish,
    torch.nn.functional.mish,
]
POSITIVE = [torch.log1p, torch.rsqrt, torch.sqrt, torch.log]


@pytest.mark.parametrize("size", SIZES)
def test_unary(check, size):
    x = torch.randn(size)
    check(
        lambda a: tuple(op(a) for op in UNARY) + tuple(op(a.abs() + 0.1) for op in POSITIVE),
        x,
        atol=1e-5,
        rtol=1e-5,
    )


BINARY = [
    torch.add,
    torch.sub,
    torch.mul,
    torch.div,
    torch.maximum,
    torch.minimum,
    torch.atan2,
    torch.remainder,
    torch.fmod,
    torch.pow,
    torch.eq,
    torch.lt,
    torch.ge,
]


def test_binary_broadcast(check):
    x = torch.randn(7, 1, 5)
    y = torch.randn(3, 1).abs() + 0.5
    check(lambda a, b: tuple(op(a, b) for op in BINARY), x, y, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_scalars_alpha_and_rsub(check):
    x = torch.randn(7, 9)
    check(lambda a: (torch.add(a, a, alpha=3) - 2.5, 1 - a, a / 3, a**2, 2 * a + 1), x)


def test_non_contiguous_inputs(check):
    x = torch.randn(9, 7).t()
    y = torch.randn(7, 18)[:, ::2]
    check(lambda a, b: (a * b + 1,), x, y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_computed_in_float32(check, dtype):
    x = torch.randn(5, 33, dtype=dtype)
    y = torch.randn(33, dtype=dtype)
    check(lambda a, b: ((a * b).sigmoid() + a,), x, y, atol=1e-2, rtol=1e-2)


def test_int_and_bool_ops(check):
    a = torch.randint(-20, 20, (7, 5))
    b = torch.randint(1, 6, (5,))
    m = torch.rand(7, 5) > 0.5
    check(
        lambda a, b, m: (
            a + b,
            a // b,
            torch.div(a, b, rounding_mode="trunc"),
            a % b,
            a / b,
            a * 2,
            a & b,
            m & (a > 0),
            ~m,
            torch.where(m, a, b),
            a.to(torch.float32) * 0.5,
            (a > 3).to(torch.int64),
        ),
        a,
        b,
        m,
    )


def test_where_clamp_masked_fill(check):
    x = torch.randn(7, 11)
    m = torch.rand(7, 11) > 0.3
    check(
        lambda x, m: (
            torch.where(m, x, 0.0),
            x.clamp(-0.5, 0.5),
            x.clamp(min=0.1),
            x.masked_fill(m, -1.0),
            torch.nn.functional.hardtanh(x),
        ),
        x,
        m,
    )


def test_full_and_arange(check):
    x = torch.randn(4, 6)
    check(
        lambda x: (
            x + torch.ones(4, 6),
            torch.zeros_like(x) + 3,
            torch.arange(6) * 2 + x,
            torch.full((4, 1), 2.5) * x,
        ),
        x,
    )


def test_nan_and_inf_predicates(check):
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), -0.0, 3.0])
    check(lambda x: (torch.isnan(x), torch.isinf(x), torch.signbit(x)), x)
