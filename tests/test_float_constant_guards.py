"""A Python float specialised into a compiled graph is guarded exactly: -0.0 after 0.0 recompiles
(1 / -0.0 is -inf), a NaN after a NaN of the same sign reuses the entry, and -NaN (which copysign
tells from NaN) does not."""

from __future__ import annotations

import math
import warnings

import torch
import torchkiln


def _divide(a, s):
    return a / s, torch.copysign(a, s)


def test_signed_zero_and_nan_through_the_pipeline():
    compiled = torchkiln.compile(_divide)
    a = torch.rand(5) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for s in (0.0, -0.0, 0.0, math.nan, float("nan"), -0.0, 2.0):
            torch.testing.assert_close(compiled(a, s), _divide(a, s), equal_nan=True)
    assert len(torchkiln.report(compiled).graphs) == 4  # 0.0, -0.0, NaN, 2.0
    assert torch.isneginf(compiled(a, -0.0)[0]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # -NaN cannot be written into a graph: it runs in Python
        got = compiled(a, -math.nan)
    torch.testing.assert_close(got, _divide(a, -math.nan), equal_nan=True)
    assert (got[1] < 0).all()
