"""A Python float specialised into a compiled graph is guarded exactly: -0.0 after 0.0 recompiles
(1 / -0.0 is -inf), and a NaN after a NaN reuses the entry."""

from __future__ import annotations

import math
import warnings

import torch
import torchkiln


def _divide(a, s):
    return a / s


def test_signed_zero_and_nan_through_the_pipeline():
    compiled = torchkiln.compile(_divide)
    a = torch.rand(5) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for s in (0.0, -0.0, 0.0, math.nan, -math.nan, -0.0, 2.0):
            torch.testing.assert_close(compiled(a, s), _divide(a, s), equal_nan=True)
    assert torch.isneginf(compiled(a, -0.0)).all()
    assert len(torchkiln.report(compiled).graphs) == 4  # 0.0, -0.0, NaN, 2.0
