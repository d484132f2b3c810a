"""Through the whole CPU pipeline: a failing compiled graph never applies its mutations twice, a
user error (an index out of range) raises as eager's without switching the graph to eager, and
Python code before the error runs once."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchkiln


def _bump_and_transpose(a, x):
    a.add_(1)
    x.t_()
    return a * 2


def test_a_metadata_mutation_is_not_replayed():
    # x.t_() on a square x: was compiled as a copy of values, failed after `a` was written back,
    # and the graph's eager re-run added 1 to `a` a second time
    compiled = torchkiln.compile(_bump_and_transpose)
    for _ in range(2):
        a_c, x_c = torch.randn(4), torch.randn(3, 3)
        a_e, x_e = a_c.clone(), x_c.clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the graph runs eagerly (a warning says why)
            got = compiled(a_c, x_c)
        want = _bump_and_transpose(a_e, x_e)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(a_c, a_e)
        torch.testing.assert_close(x_c, x_e)
        assert x_c.stride() == x_e.stride()


def _gather_after_print(x, idx):
    print("before the graph")
    return x[idx] * 2


def test_an_out_of_range_call_raises_and_keeps_compiling(capsys):
    compiled = torchkiln.compile(_gather_after_print)
    x = torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        torch.testing.assert_close(compiled(x, torch.tensor([1, 4])), x[[1, 4]] * 2)
        capsys.readouterr()
        with pytest.raises(IndexError, match="out of bounds"):
            compiled(x, torch.tensor([7]))
        assert capsys.readouterr().out == "before the graph\n"  # once: nothing was replayed
        for idx in ([0], [3, 2]):
            torch.testing.assert_close(compiled(x, torch.tensor(idx)), x[idx] * 2)
    assert not torchkiln.report(compiled).eager_fallbacks  # the graph was not switched to eager


def _bump_then_gather(a, x, idx):
    a.add_(1)
    return x[idx]


def test_a_user_error_after_an_input_mutation_matches_eager():
    # eager raises after a.add_(1): `a` keeps its new value, exactly once
    compiled = torchkiln.compile(_bump_then_gather)
    x = torch.randn(4)
    a_c = torch.zeros(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(compiled(a_c, x, torch.tensor([2])), x[[2]])
        with pytest.raises(IndexError):
            compiled(a_c, x, torch.tensor([9]))
    a_e = torch.zeros(3)
    _bump_then_gather(a_e, x, torch.tensor([2]))
    with pytest.raises(IndexError):
        _bump_then_gather(a_e, x, torch.tensor([9]))
    torch.testing.assert_close(a_c, a_e)
    assert not torchkiln.report(compiled).eager_fallbacks


def _bump_both(a, b):
    a.add_(1)
    b.add_(1)
    return a + b


def test_writing_an_expanded_input_raises_as_eager_with_the_first_write_once():
    compiled = torchkiln.compile(_bump_both)
    a_c, a_e = torch.zeros(3), torch.zeros(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="single memory location") as got:
            compiled(a_c, torch.zeros(1).expand(3))
    with pytest.raises(RuntimeError, match="single memory location") as want:
        _bump_both(a_e, torch.zeros(1).expand(3))
    assert type(got.value) is type(want.value)
    torch.testing.assert_close(a_c, a_e)
