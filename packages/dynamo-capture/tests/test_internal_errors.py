"""Capture's own failures: a Python scalar type given where torch takes a dtype (the graph's code
cannot spell ``int``; transformers 5.25's Mamba writes ``torch.tensor(0, dtype=int)``), and what
an internal error does with and without ``strict``. Every result against eager on fresh inputs."""

from __future__ import annotations

import warnings

import pytest
import torch
from torchkiln_dynamo_capture import capture, wrapper
from torchkiln_dynamo_capture.testing import RecordingBackend


def _scalar_type_dtypes(x):
    step = torch.tensor(3, dtype=int)  # int64
    zeros = torch.zeros(x.shape[0], dtype=float)  # float64
    mask = torch.full(x.shape, 1, dtype=bool)
    return x.to(float) * step + zeros.sum(), mask & (x > 0), x.new_zeros(2, dtype=complex)


def test_python_scalar_types_are_the_dtypes_torch_reads_them_as():
    backend = RecordingBackend()
    f = capture(_scalar_type_dtypes, backend, strict=True)
    for _ in range(2):  # fresh inputs each call
        x = torch.randn(5)
        got, expected = f(x), _scalar_type_dtypes(x)
        for g, e in zip(got, expected):
            assert g.dtype == e.dtype
            torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert backend.calls == 1
    assert "torch.int64" in backend.code[0] and "torch.float64" in backend.code[0]


def _broken_capture_frame(*args, **kwargs):
    raise RuntimeError("capture exploded")


def _double(x):
    return x * 2


def test_an_internal_error_runs_eagerly_with_one_warning(monkeypatch):
    monkeypatch.setattr(wrapper, "capture_frame", _broken_capture_frame)
    backend = RecordingBackend()
    f = capture(_double, backend)
    x = torch.randn(4)
    with pytest.warns(
        UserWarning, match="internal error during capture: RuntimeError: capture exploded"
    ):
        torch.testing.assert_close(f(x), x * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # later calls: eager, no new warning
        y = torch.randn(4)
        torch.testing.assert_close(f(y), y * 2)
    assert backend.calls == 0


def test_strict_raises_an_internal_error(monkeypatch):
    monkeypatch.setattr(wrapper, "capture_frame", _broken_capture_frame)
    f = capture(_double, RecordingBackend(), strict=True)
    with pytest.raises(RuntimeError, match="capture exploded"):
        f(torch.randn(4))
    module = capture(torch.nn.Linear(3, 2), RecordingBackend(), strict=True)
    with pytest.raises(RuntimeError, match="capture exploded"):
        module(torch.randn(2, 3))
