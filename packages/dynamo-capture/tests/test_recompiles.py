"""Recompiles explain themselves: each kind of guarded change causes exactly one recompile, a result
equal to eager, and a "torchkiln.recompiles" log line naming the failing guard and the function's
file:line."""

from __future__ import annotations

import logging
import sys
import warnings

import pytest
import torch
from torch import nn
from torchkiln_dynamo_capture import FailOnRecompileLimitHit, RecompileLimitExceeded, capture
from torchkiln_dynamo_capture.testing import RecordingBackend

SCALE = 2.0


def _uses_global(x):
    return x * SCALE + 1


class _Flagged(nn.Module):
    def forward(self, x):
        return x.relu() * 2 if self.training else x.sigmoid()


def _make_closure():
    n = 3

    def f(x):
        return x * n

    def bump():
        nonlocal n
        n = 5

    return f, bump


def _two(x, y):
    return x * 2 + y


def _tiny(x):
    return (x * 3).sum(-1)


def _line(fn):
    code = fn.__code__ if not isinstance(fn, nn.Module) else type(fn).forward.__code__
    return f"{code.co_filename}:{code.co_firstlineno}"


def _check_one_recompile(caplog, cf, be, fn_for_line, before, after, eager, expected):
    """Call with ``before`` twice (one capture), then ``after``: one more backend call, eager result,
    and one recompile log line containing ``expected`` and the function's file:line."""
    with caplog.at_level(logging.INFO, logger="torchkiln.recompiles"):
        for _ in range(2):
            args = before()
            torch.testing.assert_close(cf(*args), eager(*args))
        assert be.calls == 1
        assert not caplog.records
        args = after()
        torch.testing.assert_close(cf(*args), eager(*args))
        assert be.calls == 2
        args = after()
        torch.testing.assert_close(cf(*args), eager(*args))
        assert be.calls == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "torchkiln.recompiles"]
    assert len(lines) == 1, lines
    assert expected in lines[0], lines[0]
    assert _line(fn_for_line) in lines[0]


def test_global_change(caplog):
    be = RecordingBackend()
    cf = capture(_uses_global, be, fullgraph=True)
    mod = sys.modules[__name__]
    try:
        _check_one_recompile(
            caplog,
            cf,
            be,
            _uses_global,
            lambda: (torch.randn(4),),
            lambda: (setattr(mod, "SCALE", 3.0), torch.randn(4))[1:],
            _uses_global,
            "G['SCALE']: expected 2.0, got 3.0",
        )
    finally:
        mod.SCALE = 2.0


def test_module_training_flag(caplog):
    be = RecordingBackend()
    m = _Flagged().train()
    cm = capture(m, be, fullgraph=True)

    def after():
        m.eval()
        return (torch.randn(5),)

    _check_one_recompile(
        caplog,
        cm,
        be,
        m,
        lambda: (torch.randn(5),),
        after,
        m,
        "L['self'].training: expected True, got False",
    )


def test_closure_value(caplog):
    be = RecordingBackend()
    f, bump = _make_closure()
    cf = capture(f, be, fullgraph=True)

    def after():
        bump()
        return (torch.randn(3),)

    _check_one_recompile(
        caplog, cf, be, f, lambda: (torch.randn(3),), after, f, "C['n']: expected 3, got 5"
    )


def test_dtype(caplog):
    be = RecordingBackend()
    cf = capture(_tiny, be, fullgraph=True)
    _check_one_recompile(
        caplog,
        cf,
        be,
        _tiny,
        lambda: (torch.randn(2, 4),),
        lambda: (torch.randn(2, 4).double(),),
        _tiny,
        "L['x'].dtype: expected torch.float32, got torch.float64",
    )


def test_shape(caplog):
    be = RecordingBackend()
    cf = capture(_tiny, be, fullgraph=True)
    _check_one_recompile(
        caplog,
        cf,
        be,
        _tiny,
        lambda: (torch.randn(2, 4),),
        lambda: (torch.randn(3, 4),),
        _tiny,
        "L['x'].size()[0]: expected 2, got 3",
    )


def test_aliasing_two_tensors_then_same_tensor(caplog):
    be = RecordingBackend()
    cf = capture(_two, be, fullgraph=True)

    def same():
        x = torch.randn(4)
        return x, x

    _check_one_recompile(
        caplog,
        cf,
        be,
        _two,
        lambda: (torch.randn(4), torch.randn(4)),
        same,
        _two,
        "L['y'] shares a storage with: expected no earlier input, got L['x']",
    )


def test_aliasing_same_tensor_then_two_tensors(caplog):
    be = RecordingBackend()
    cf = capture(_two, be, fullgraph=True)

    def same():
        x = torch.randn(4)
        return x, x

    _check_one_recompile(
        caplog,
        cf,
        be,
        _two,
        same,
        lambda: (torch.randn(4), torch.randn(4)),
        _two,
        "L['y'] is L['x']: expected True, got False",
    )


def test_grad_mode(caplog):
    be = RecordingBackend()
    cf = capture(_tiny, be, fullgraph=True)
    w = torch.randn(4, requires_grad=True)

    def before():
        torch.set_grad_enabled(True)
        return (w,)

    def after():
        torch.set_grad_enabled(False)
        return (w,)

    try:
        _check_one_recompile(
            caplog,
            cf,
            be,
            _tiny,
            before,
            after,
            _tiny,
            "torch.is_grad_enabled(): expected True, got False",
        )
        assert not cf(w).requires_grad
    finally:
        torch.set_grad_enabled(True)


def test_env_var_prints_recompiles_to_stderr(monkeypatch, capsys):
    monkeypatch.setenv("TORCHKILN_LOGS", "recompiles")
    cf = capture(_tiny, RecordingBackend(), fullgraph=True)
    x = torch.randn(3, 2)
    torch.testing.assert_close(cf(x), _tiny(x))
    y = torch.randn(3, 2).half()
    torch.testing.assert_close(cf(y), _tiny(y))
    err = capsys.readouterr().err
    assert "[torchkiln.recompiles] Recompiling _tiny" in err
    assert "L['x'].dtype: expected torch.float32, got torch.float16" in err


def test_guards_log_shows_each_entry_source(monkeypatch, caplog):
    monkeypatch.setenv("TORCHKILN_LOGS", "guards")
    cf = capture(_tiny, RecordingBackend(), fullgraph=True, dynamic=False)
    with caplog.at_level(logging.INFO, logger="torchkiln.guards"):
        for shape in ((2, 3), (4, 3)):
            x = torch.randn(*shape)
            torch.testing.assert_close(cf(x), _tiny(x))
    texts = [r.getMessage() for r in caplog.records if r.name == "torchkiln.guards"]
    assert len(texts) == 2
    assert "x.shape == (2, 3)" in texts[0] and "x.shape == (4, 3)" in texts[1]
    assert [e.guards.source in t for e, t in zip(cf.entries, texts)] == [True, True]


def test_recompile_limit_under_fullgraph_raises_as_torch_compile_does():
    cf = capture(_tiny, RecordingBackend(), fullgraph=True, recompile_limit=1)
    x = torch.randn(5)
    torch.testing.assert_close(cf(x), _tiny(x))
    with pytest.raises(
        FailOnRecompileLimitHit, match=r"fullgraph=True.*L\['x'\]\.size\(\)\[0\]: expected 5, got 6"
    ):
        cf(torch.randn(6))
    torch.testing.assert_close(cf(x), _tiny(x))  # the compiled size still runs compiled


def test_recompile_limit_warning_names_the_guard():
    cf = capture(_tiny, RecordingBackend(), recompile_limit=1)
    x = torch.randn(5)
    torch.testing.assert_close(cf(x), _tiny(x))
    y = torch.randn(6)
    with pytest.warns(RecompileLimitExceeded, match=r"L\['x'\]\.size\(\)\[0\]: expected 5, got 6"):
        torch.testing.assert_close(cf(y), _tiny(y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(cf(y), _tiny(y))


def test_a_misspelt_log_name_fails_when_capturing_starts(monkeypatch):
    monkeypatch.setenv("TORCHKILN_LOGS", "recompile")
    with pytest.raises(ValueError, match="'recompile'.*valid names:.*recompiles"):
        capture(_tiny, RecordingBackend())


def _divide(a, s):
    return a / s


def test_signed_zero_and_nan_arguments():
    # a Python float is specialised into the graph: -0.0 after 0.0 recompiles (1 / -0.0 is -inf),
    # and NaN after NaN reuses the entry (every NaN divides the same)
    backend = RecordingBackend()
    f = capture(_divide, backend)
    a = torch.randn(4)
    for s in (0.0, -0.0, 0.0, float("nan"), float("nan"), -0.0):
        torch.testing.assert_close(f(a, s), _divide(a, s), equal_nan=True)
    assert backend.calls == 3


def _tolist_summed(x):
    y = x.sigmoid()
    n = sum(sum(r) for r in (y > 0.5).int().tolist())  # a graph break; n differs per call
    return y * n


def _tolist_indexed(x):
    y = x.sigmoid()
    rows = (y > 0.5).int().tolist()
    return y * rows[0][0] + rows[2][3] - rows[1][1]


def _item_scaled(x):
    y = x.cos()
    return y * (y > 0.5).sum().item()


@pytest.mark.parametrize("fn", [_tolist_summed, _tolist_indexed, _item_scaled])
def test_values_read_from_tensors_recompile_once(fn):
    """``.item()``/``.tolist()`` break the graph and hand ints to the continuation: its first
    entry is static, the first recompile makes the ints symbolic (every int of the list, not only
    the ones seen changing), and then every new value reuses that entry, as TorchDynamo's
    automatic dynamic ints do."""
    be = RecordingBackend()
    cf = capture(fn, be)
    torch.manual_seed(0)
    values = set()
    for _ in range(10):
        x = torch.randn(3, 4)
        torch.testing.assert_close(cf(x), fn(x))
        values.add(
            int((x.sigmoid() > 0.5).sum()) if fn is not _item_scaled else int((x.cos() > 0.5).sum())
        )
    assert len(values) > 3  # the values really changed from call to call
    assert be.calls == 3, (
        f"{be.calls} graphs: the first graph, the static continuation, the symbolic one"
    )
