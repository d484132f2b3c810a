"""Reduction lowerings against eager."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize(
    "size,dim", [((1,), 0), ((7,), 0), ((3, 257), 1), ((5, 7, 3), (0, 2)), ((4, 6), None)]
)
def test_sum_mean_amax(check, size, dim):
    x = torch.randn(size)
    if dim is None:
        check(lambda a: (a.sum(), a.mean(), a.amax(), a.amin()), x)
    else:
        check(
            lambda a: (
                a.sum(dim),
                a.mean(dim, keepdim=True),
                a.amax(dim),
                a.amin(dim, keepdim=True),
            ),
            x,
            atol=1e-4,
            rtol=1e-5,
        )


def test_arg_and_max_dim(check):
    x = torch.randn(7, 33)
    check(lambda a: (a.argmax(1), a.argmin(0), a.argmax(), *a.max(1), *a.min(0, keepdim=True)), x)


def test_prod_any_all(check):
    x = torch.rand(5, 7) + 0.5
    m = torch.rand(5, 7) > 0.2
    check(lambda a, m: (a.prod(1), m.any(1), m.all(0), m.any(), (a > 1.2).all(1)), x, m)


def test_var_std(check):
    x = torch.randn(6, 129)
    check(
        lambda a: (
            a.var(1),
            a.std(0, keepdim=True),
            *torch.var_mean(a, 1, correction=0),
            a.var(1, unbiased=False),
        ),
        x,
        atol=1e-5,
        rtol=1e-4,
    )


def test_sum_non_contiguous_and_int(check):
    x = torch.randn(9, 7).t()
    i = torch.randint(-5, 5, (4, 9))
    check(lambda a, i: (a.sum(0), a.sum(1), i.sum(1), i.sum()), x, i, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_reductions(check, dtype):
    x = torch.randn(4, 257, dtype=dtype)
    check(lambda a: (a.sum(1), a.mean(1), a.amax(1)), x, atol=2e-2, rtol=2e-2)


def test_softmax_and_log_softmax(check):
    x = torch.randn(5, 37)
    check(lambda a: (torch.softmax(a, -1), torch.log_softmax(a, 0)), x)


def test_welford_var_mean_is_one_pass_and_accurate_with_large_means(check):
    x = 1000 + torch.randn(6, 3001, dtype=torch.float64).float()
    cg = check(
        lambda a: (*torch.var_mean(a, -1, correction=1), a.std(0), torch.var(a)),
        x,
        atol=1e-5,
        rtol=2e-5,
    )
    kinds = [k for k in cg.kernel_specs if any(n.is_reduction for s in k.stages for n in s.nodes)]
    # var_mean over a row: mean and m2 come from one welford_reduce stage of one kernel
    assert any(sum(n.is_reduction for n in s.nodes) == 2 for k in kinds for s in k.stages)
    ref = torch.var_mean(x.double(), -1, correction=1)[0]
    got = cg(x)[0]
    assert float(((got.double() - ref).abs() / ref).max()) < 1e-5


def test_large_reduction_to_few_outputs_is_split_in_two_kernels(check):
    x, y = torch.randn(2**20), torch.randn(3, 2**17)
    cg = check(lambda a, b: (a.sum(), a.amax(), b.sum(-1)), x, y, atol=2e-3, rtol=1e-5)
    shapes = sorted((len(k.xranges), k.rranges) for k in cg.kernel_specs)
    # partials: 128 per output of a.sum()/a.amax() (one fused kernel), 32 per row of b.sum(-1);
    # then the short reductions of the partials
    assert (1, (8192,)) in shapes and (2, (4096,)) in shapes, shapes
    assert (0, (128,)) in shapes and (1, (32,)) in shapes, shapes


def test_argmax_ties_pick_the_lowest_index(check):
    x = torch.randint(0, 3, (9, 300)).float()
    x[4] = 7.0  # a whole row of equal values
    check(lambda a: (a.argmax(-1), a.argmin(-1), a.argmax(0), a.argmax(), a.max(-1)[1]), x)


def test_long_welford_is_split_and_combined(check):
    x = 1000 + torch.randn(2**17)
    cg = check(lambda a: (a.var(), *torch.var_mean(a.reshape(2, -1), -1)), x, atol=1e-3, rtol=2e-5)
    shapes = sorted((len(k.xranges), k.rranges) for k in cg.kernel_specs)
    # partial (mean, m2, weight) per chunk, then welford_combine of the partials
    assert (0, (128,)) in shapes and (1, (1024,)) in shapes, shapes
    text = cg.schedule_text()
    assert "welford_combine" in text and "welford_reduce" in text
