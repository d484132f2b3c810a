"""Reduction lowerings against eager."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("size,dim", [((1,), 0), ((7,), 0), ((3, 257), 1), ((5, 7, 3), (0, 2)), ((4, 6), None)])
def test_sum_mean_amax(check, size, dim):
    x = torch.randn(size)
    if dim is None:
        check(lambda a: (a.sum(), a.mean(), a.amax(), a.amin()), x)
    else:
        check(lambda a: (a.sum(dim), a.mean(dim, keepdim=True), a.amax(dim), a.amin(dim, keepdim=True)), x,
              atol=1e-4, rtol=1e-5)


def test_arg_and_max_dim(check):
    x = torch.randn(7, 33)
    check(lambda a: (a.argmax(1), a.argmin(0), a.argmax(), *a.max(1), *a.min(0, keepdim=True)), x)


def test_prod_any_all(check):
    x = torch.rand(5, 7) + 0.5
    m = torch.rand(5, 7) > 0.2
    check(lambda a, m: (a.prod(1), m.any(1), m.all(0), m.any(), (a > 1.2).all(1)), x, m)


def test_var_std(check):
    x = torch.randn(6, 129)
    check(lambda a: (a.var(1), a.std(0, keepdim=True), *torch.var_mean(a, 1, correction=0),
                     a.var(1, unbiased=False)), x, atol=1e-5, rtol=1e-4)


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
