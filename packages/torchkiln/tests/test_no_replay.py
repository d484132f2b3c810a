"""Fallback without replay: a failing compiled graph is re-run eagerly only when it had no effect,
a user error raises as eager's and keeps the compiled graph, and a function that failed inside
torchkiln after its code ran is not run again (FailedAfterEffects)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torchkiln
import torchkiln_aot_partition
import torchkiln_dynamo_capture
from torchkiln.options import CompileOptions
from torchkiln.pipeline import _guard_calls, _Where
from torchkiln.report import ReportRecorder


def _graph(fn) -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(fn)


class _Counted:
    """A compiled graph stand-in: counts calls; raises ``error`` (when given) instead of running."""

    def __init__(self, gm, error=None):
        self.gm, self.error, self.calls = gm, error, 0

    def __call__(self, *args):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.gm(*args)


def _add_one(a):
    a.add_(1)
    return a * 2


def _index(x, i):
    return x[i] + 1


def test_a_graph_failing_after_writing_back_is_not_replayed():
    gm = _graph(_add_one)
    eager_calls = []
    forward = gm.forward
    gm.forward = lambda *a: (eager_calls.append(1), forward(*a))[1]
    applied = torchkiln_aot_partition.MutationAppliedError("writing back failed part way")
    compiled = _Counted(gm, applied)
    recorder = ReportRecorder()
    run = _guard_calls(compiled, gm, _Where("f", 0, 3, None), CompileOptions(), recorder)
    a = torch.zeros(3)
    with pytest.warns(UserWarning, match="running the compiled graph"):
        with pytest.raises(torchkiln.FailedAfterEffects, match="not re-run eagerly") as info:
            run(a)
    assert info.value.__cause__ is applied and not eager_calls
    # later calls run eagerly, once each
    torch.testing.assert_close(run(a), torch.full((3,), 2.0))
    assert eager_calls == [1] and compiled.calls == 1
    assert "running the compiled graph" in recorder.snapshot([], []).eager_fallbacks[0].reason


def test_a_user_error_raises_as_eager_and_keeps_the_compiled_graph():
    gm = _graph(_index)
    compiled = _Counted(gm)
    recorder = ReportRecorder()
    run = _guard_calls(compiled, gm, _Where("f", 0, 3, None), CompileOptions(), recorder)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled.error = IndexError("compiled: out of range")
        with pytest.raises(IndexError, match="out of bounds") as info:
            run(x, 5)  # eager raises too: eager's own exception, not chained to the compiled one
        assert info.value.__context__ is None
        compiled.error = None
        torch.testing.assert_close(run(x, 1), _index(x, 1))
    assert compiled.calls == 2  # the compiled graph is still the one in use
    assert not recorder.snapshot([], []).eager_fallbacks


def test_an_internal_graph_error_runs_the_graph_eagerly_once():
    gm = _graph(_index)
    compiled = _Counted(gm, RuntimeError("kernel crashed"))
    run = _guard_calls(compiled, gm, _Where("f", 0, 3, None), CompileOptions(), ReportRecorder())
    x = torch.randn(3)
    with pytest.warns(UserWarning, match="kernel crashed"):
        torch.testing.assert_close(run(x, 2), _index(x, 2))
    torch.testing.assert_close(run(x, 0), _index(x, 0))
    assert compiled.calls == 1  # eager for good after an internal failure


def _bump_then_index(a, i):
    a.add_(1)
    return a[i]


def test_after_a_fallback_a_user_error_runs_the_eager_graph_once():
    # a real GraphModule (its forward a method, a new bound object on each access): once the
    # graph runs eagerly, a call that raises in eager runs it once, not again to "check"
    gm = _graph(_bump_then_index)
    compiled = _Counted(gm, RuntimeError("kernel crashed"))
    run = _guard_calls(compiled, gm, _Where("f", 0, 3, None), CompileOptions(), ReportRecorder())
    a = torch.zeros(3)
    with pytest.warns(UserWarning, match="kernel crashed"):
        torch.testing.assert_close(run(a, 1), torch.tensor(1.0))
    with pytest.raises(IndexError):
        run(a, 5)
    torch.testing.assert_close(a, torch.full((3,), 2.0))  # one eager add per call, as in eager
    assert compiled.calls == 1


def _as_capture_code(source: str, name: str, filename: str, **names) -> Any:
    """A function whose frames read as capture's (its module is torchkiln_dynamo_capture's)."""
    scope = {"__name__": "torchkiln_dynamo_capture._standin", **names}
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


def test_an_internal_error_after_the_function_ran_is_not_replayed(monkeypatch):
    # capture's generated ``run`` calls the user's code (a graph break), then fails itself
    source = "def run(*args):\n    fn(*args)\n    raise AssertionError('reconstruct bug')\n"

    def capture(fn, backend, **kwargs):
        return _as_capture_code(source, "run", "<torchkiln generated run>", fn=fn)

    monkeypatch.setattr(torchkiln_dynamo_capture, "capture", capture)
    log = []

    def f(x):
        log.append("printed")
        return x + 1

    compiled = torchkiln.compile(f)
    x = torch.randn(3)
    with pytest.warns(UserWarning, match="reconstruct bug"):
        with pytest.raises(torchkiln.FailedAfterEffects, match="not re-run eagerly") as info:
            compiled(x)
    assert log == ["printed"] and isinstance(info.value.__cause__, AssertionError)
    torch.testing.assert_close(compiled(x), x + 1)  # eagerly from the next call, once
    assert log == ["printed", "printed"]


def test_a_user_error_inside_torch_is_not_replayed(monkeypatch):
    # the user's code calls into torch, which raises: the user's error, even though the innermost
    # frame is torch's
    def capture(fn, backend, **kwargs):
        return _as_capture_code(
            "def run(*args):\n    return fn(*args)\n", "run", "<torchkiln generated run>", fn=fn
        )

    monkeypatch.setattr(torchkiln_dynamo_capture, "capture", capture)
    log = []

    def f(x):
        log.append("printed")
        return torch.nn.functional.interpolate(x, scale_factor=2.0)  # raises in torch's Python code

    compiled = torchkiln.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(NotImplementedError, match="Input Error"):
            compiled(torch.randn(3))
    assert log == ["printed"]


def test_arguments_that_do_not_fit_raise_as_eager():
    def f(x, y):
        return x + y

    compiled = torchkiln.compile(f, backend="eager")
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x, x), x + x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="missing 1 required positional argument"):
            compiled(x)
    torch.testing.assert_close(compiled(x, 2 * x), 3 * x)
    assert not torchkiln.report(compiled).eager_fallbacks
