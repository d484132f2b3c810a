"""A float converted to an integer type where C++'s cast is undefined (NaN, infinities, values
out of the type's range) gives eager's CPU value, x86's conversion: "integer indefinite"
(INT32_MIN / INT64_MIN), narrower types the low bits of int32's. A fused kernel had GCC fold
``(int64_t)(0.0 / 0.0)`` to 0 (the variance of one value, cast: CPU fuzz seed 785281)."""

from __future__ import annotations

import pytest
import torch
import torchkiln

INT_TYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


@pytest.mark.parametrize("dtype", INT_TYPES, ids=str)
@pytest.mark.parametrize("src", [torch.float32, torch.float64], ids=str)
def test_special_floats_convert_as_eager(dtype, src):
    def f(x):
        return (x * 2).to(dtype)

    x = torch.tensor(
        [float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e20, -1e20, 300.7, -3.5, 0.0],
        dtype=src,
    )
    x = torch.cat([x, torch.randn(37, dtype=src) * 1000])  # a vector loop and its tail
    got = torchkiln.compile(f, options={"codegen": "cpp"})(x)
    assert torch.equal(got, f(x)), (got, f(x))


def test_variance_of_one_value_cast_to_int64():
    def f(x):
        return x.var(dim=0).to(torch.float64).to(torch.int64)

    x = torch.randn(1, 2, 3)
    got = torchkiln.compile(f, options={"codegen": "cpp"})(x)
    assert torch.equal(got, f(x)), (got, f(x))


@pytest.mark.parametrize("n", [5, 30, 67], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=str)
@pytest.mark.parametrize("src", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_a_round_trip_through_an_integer_gives_positive_zero(src, dtype, n):
    """CPU fuzz seed 793588: ``x / x.to(int64)``. A negative fraction converts to the integer
    0 and back to +0.0, so eager's quotient is -inf; GCC (-fno-trapping-math) folded the round
    trip into truncf in a vector loop's scalar tail, -0.0 there, +inf. Rows of 5 (a tail of 1
    after a vector of 4), 30 and 67, every value a fresh negative or positive fraction or a
    larger value; the zeros' signs must be eager's too."""

    def f(x):
        t = x.to(dtype)
        return x / t, t.to(x.dtype), (t.to(x.dtype) * -1.0).to(torch.float32)

    compiled = torchkiln.compile(f, options={"codegen": "cpp"})
    for _ in range(2):
        x = (torch.rand(3, n) - 0.5).to(src)  # fractions: the integer 0
        x[0] = (torch.randn(n) * 4).to(src)  # some whole parts
        got, want = compiled(x), f(x)
        for g, w in zip(got, want):
            assert torch.equal(g, w), (g, w)
            assert torch.equal(torch.signbit(g), torch.signbit(w)), (g, w)
