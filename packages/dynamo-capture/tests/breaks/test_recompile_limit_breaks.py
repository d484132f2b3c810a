"""The recompile limit (8 per function): a Python float argument that keeps changing compiles 8
entries, then the function runs eagerly with exactly one RecompileLimitExceeded warning naming the
guard; results and printed output always equal eager's. (Floats are specialised, in TorchDynamo
too; an int argument that changes becomes a symbolic graph input at the first recompile instead,
automatic dynamic shapes: two entries for any number of values, as TorchDynamo.)"""

from __future__ import annotations

import contextlib
import io
import warnings

import torch
from torchkiln_dynamo_capture import RecompileLimitExceeded, capture
from torchkiln_dynamo_capture.testing import RecordingBackend


def _scaled(x, n):
    return x * n + 1


def _scaled_with_break(x, n):
    y = x * n
    print("n =", n)
    return y + n


def _run_ten_values(fn):
    be = RecordingBackend()
    cf = capture(fn, be)
    caught_all = []
    for n in (k + 0.5 for k in range(10)):
        x = torch.randn(3, 4)
        eager_out, captured_out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(eager_out):
            expected = fn(x.clone(), n)
        with (
            warnings.catch_warnings(record=True) as caught,
            contextlib.redirect_stdout(captured_out),
        ):
            warnings.simplefilter("always")
            got = cf(x.clone(), n)
        caught_all.extend(caught)
        torch.testing.assert_close(got, expected)
        assert captured_out.getvalue() == eager_out.getvalue(), f"n={n}: printed output differs"
    limit = [w for w in caught_all if issubclass(w.category, RecompileLimitExceeded)]
    return cf, be, limit


def test_recompile_limit_without_break():
    cf, be, limit = _run_ten_values(_scaled)
    assert len(cf.entries) == 8
    assert be.calls == 8
    assert len(limit) == 1, [str(w.message) for w in limit]
    assert "L['n']" in str(limit[0].message), str(limit[0].message)


def test_recompile_limit_with_break():
    """Each of the first 8 values compiles the graph before the print and the continuation's graph
    (which reads ``n``, so it is guarded on it too); values 9 and 10 run eagerly."""
    cf, be, limit = _run_ten_values(_scaled_with_break)
    assert len(cf.entries) == 8
    assert be.calls == 16
    assert len(limit) == 1, [str(w.message) for w in limit]
    assert "L['n']" in str(limit[0].message), str(limit[0].message)


def test_values_seen_before_the_limit_still_hit_their_entries():
    be = RecordingBackend()
    cf = capture(_scaled_with_break, be)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        for n in range(10):
            cf(torch.randn(3, 4), n + 0.5)
        before = be.calls
        for n in (k + 0.5 for k in range(8)):
            x = torch.randn(3, 4)
            torch.testing.assert_close(cf(x, n), _scaled_with_break(x, n))
    assert be.calls == before == 16


def test_changing_int_argument_becomes_symbolic_after_one_recompile():
    """An int that changes is a symbolic graph input from the first recompile (automatic dynamic,
    any value, 0 and 1 included): two entries and four graphs for ten values, with a break."""
    be = RecordingBackend()
    cf = capture(_scaled_with_break, be)
    with contextlib.redirect_stdout(io.StringIO()):
        for n in range(10):
            x = torch.randn(3, 4)
            torch.testing.assert_close(cf(x, n), _scaled_with_break(x, n))
        torch.testing.assert_close(cf(x, -3), _scaled_with_break(x, -3))
    assert len(cf.entries) == 2 and be.calls == 4
