"""``.item()`` / ``.tolist()`` compiled end to end with ``capture_scalar_outputs``.

Integer values become unbacked size symbols that loop-ir binds from an extern call
(``u0 = extern(buf)``) and uses for buffer sizes, views and kernels; ``torch._check`` is checked
at run time as in eager. Float and bool values have no place in integer-sized kernels: that
graph runs eagerly with a one-line reason (strict mode raises it).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torchkiln
from torchkiln.errors import BackendCompilerFailed

ON = {"capture_scalar_outputs": True}


def _rows(x, k):
    n = k.item()
    torch._check(n > 0)
    torch._check(x.numel() % n == 0)
    return x.view(n, -1).sum(1) * 2


def _sized(x, idx):
    n = idx.max().item()
    torch._check_is_size(n)
    return torch.full((n,), 2.0) + x.sum(), torch.arange(n) * 3


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_int_item_as_size_one_graph_no_recompile(codegen):
    compiled = torchkiln.compile(_rows, options={**ON, "strict": True, "codegen": codegen})
    x = torch.randn(12)
    for k in (3, 4, 6, 2, 12, 1):
        torch.testing.assert_close(compiled(x, torch.tensor(k)), _rows(x, torch.tensor(k)))
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.eager_fallbacks and not report.graph_breaks
    assert "aten._local_scalar_dense" in report.graphs[0].extern_calls
    assert not report.graphs[0].fallbacks


def test_int_item_full_and_arange():
    compiled = torchkiln.compile(_sized, options={**ON, "strict": True})
    for _ in range(4):
        x, idx = torch.randn(3), torch.randint(0, 7, (4,))
        for got, want in zip(compiled(x, idx), _sized(x, idx)):
            torch.testing.assert_close(got, want)
    assert len(torchkiln.report(compiled).graphs) == 1


def test_failed_check_raises_like_eager():
    compiled = torchkiln.compile(_rows, options={**ON, "strict": True})
    x = torch.randn(12)
    compiled(x, torch.tensor(3))
    for bad in (5, 0, -2):
        with pytest.raises(RuntimeError):
            _rows(x, torch.tensor(bad))
        with pytest.raises(RuntimeError, match="Runtime assertion failed"):
            compiled(x, torch.tensor(bad))


def _float_scale(x, y):
    s = x.abs().max().item()
    return y / s + s


def test_float_item_runs_that_graph_eagerly_with_a_reason():
    compiled = torchkiln.compile(_float_scale, options=ON)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            x, y = torch.randn(5), torch.randn(5)
            torch.testing.assert_close(compiled(x, y), _float_scale(x, y))
    (fallback,) = torchkiln.report(compiled).eager_fallbacks
    assert "kernels take integer sizes only" in fallback.reason
    assert any("integer sizes" in str(c.message) for c in caught)
    strict = torchkiln.compile(_float_scale, options={**ON, "strict": True})
    with pytest.raises(BackendCompilerFailed, match="integer sizes"):
        strict(torch.randn(5), torch.randn(5))


def test_off_by_default_breaks_the_graph():
    compiled = torchkiln.compile(_rows, options={"strict": True})
    x = torch.randn(12)
    torch.testing.assert_close(compiled(x, torch.tensor(3)), _rows(x, torch.tensor(3)))
    report = torchkiln.report(compiled)
    assert report.graph_breaks and not report.eager_fallbacks
