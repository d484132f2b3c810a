"""Dynamic shapes: symbolic input sizes, size arithmetic in the graph, shape guards, automatic dynamic.

Every test compares with eager on fresh random inputs and counts the graphs the backend received.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.testing import RecordingBackend


def _views(x, y):
    b, t = x.shape
    z = (x * 2 + y).view(b, t // 2, 2).sum(-1)
    return z.reshape(b * (t // 2)) + x.size(0), x.numel()


def test_dynamic_true_one_graph_for_many_sizes():
    backend = RecordingBackend()
    f = capture(_views, backend, dynamic=True)
    for b, t in [(3, 8), (5, 8), (7, 6), (2, 10)]:
        x, y = torch.randn(b, t), torch.randn(t)
        got, want = f(x, y), _views(x, y)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1]
    assert len(backend.graphs) == 1
    code = backend.graphs[0].code
    assert "sym_size" in code and "view(" in code  # sizes are computed in the graph, not constants


def test_sizes_0_and_1_specialize():
    backend = RecordingBackend()
    f = capture(lambda x: x.sum(0) * x.shape[0], backend, dynamic=True)
    for b in (4, 1, 6, 1):
        x = torch.randn(b, 3)
        torch.testing.assert_close(f(x), x.sum(0) * b)
    assert len(backend.graphs) == 2  # one symbolic entry (b >= 2) and one for b == 1


def test_broadcast_relation_is_guarded():
    """x * 2 + y assumed x.size(1) == y.size(0): other sizes must not reuse the entry."""
    backend = RecordingBackend()
    f = capture(lambda x, y: x * 2 + y, backend, dynamic=True)
    x, y = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(f(x, y), x * 2 + y)
    assert any("Eq(" in str(g) for g in f.entries[0].guards.guards)
    with pytest.raises(RuntimeError, match="must match"):
        f(x, torch.randn(6))  # eager's own error, not a silently broadcast wrong result
    before = len(backend.graphs)
    x5, y5 = torch.randn(4, 5), torch.randn(5)
    torch.testing.assert_close(f(x5, y5), x5 * 2 + y5)
    assert len(backend.graphs) == before  # the first entry serves every matching pair of sizes


def test_a_size_used_as_a_python_int_specializes():
    def g(x):
        out = x
        for _ in range(x.shape[0]):  # a Python loop over a size: one unrolled graph per size
            out = out + 1
        return out

    backend = RecordingBackend()
    f = capture(g, backend, dynamic=True)
    for b in (3, 3, 4):
        x = torch.randn(b, 2)
        torch.testing.assert_close(f(x), x + b)
    assert len(backend.graphs) == 2


def test_branch_on_a_size_is_guarded():
    def g(x):
        if x.shape[0] > 4:
            return x * 2
        return x - 1

    backend = RecordingBackend()
    f = capture(g, backend, dynamic=True)
    for b in (5, 6, 3, 7, 2):
        x = torch.randn(b)
        torch.testing.assert_close(f(x), g(x))
    assert len(backend.graphs) == 2  # b > 4 and b <= 4


def test_automatic_dynamic_after_the_first_size_change(caplog):
    backend = RecordingBackend()
    f = capture(_views, backend)  # dynamic=None
    with caplog.at_level(logging.INFO, logger="torchkiln.recompiles"):
        for b in (3, 5, 7, 9, 11):
            x, y = torch.randn(b, 8), torch.randn(8)
            got, want = f(x, y), _views(x, y)
            torch.testing.assert_close(got[0], want[0])
    assert len(backend.graphs) == 2  # static at first, then dim 0 of x symbolic
    x, y = torch.randn(3, 10), torch.randn(10)  # a new size in a dim that never changed: static
    torch.testing.assert_close(f(x, y)[0], _views(x, y)[0])
    assert len(backend.graphs) == 3


def test_dynamic_false_specializes_every_size():
    backend = RecordingBackend()
    f = capture(lambda x: x.relu() * x.shape[0], backend, dynamic=False)
    for b in (3, 4, 5):
        x = torch.randn(b)
        torch.testing.assert_close(f(x), x.relu() * b)
    assert len(backend.graphs) == 3


def test_dynamic_sizes_across_a_graph_break(capsys):
    def g(x):
        n = x.shape[0]
        y = x.view(n, -1).sin()
        print("rows", n)  # n is computed from x's size at run time, not a constant
        return y.reshape(-1) * y.shape[1]

    backend = RecordingBackend()
    f = capture(g, backend, dynamic=True)
    for b in (3, 5, 6):
        x = torch.randn(b, 4)
        torch.testing.assert_close(f(x), g(x))
    out = capsys.readouterr().out.split("\n")
    assert [line for line in out if line.startswith("rows")] == [
        "rows 3",
        "rows 3",
        "rows 5",
        "rows 5",
        "rows 6",
        "rows 6",
    ]  # eager's, then ours
    assert len(backend.graphs) == 2  # before and after the print, each for every size


def test_module_with_dynamic_batch():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
    backend = RecordingBackend()
    f = capture(model, backend, dynamic=True)
    for b in (2, 9, 17):
        x = torch.randn(b, 6)
        torch.testing.assert_close(f(x), model(x))
    assert len(backend.graphs) == 1


class _Steps:
    def __init__(self, count: int) -> None:
        self.count = count


def _step(x, state):
    state.count += 1
    return x * state.count, state.count


def test_int_attribute_that_changed_is_symbolic_and_its_update_is_read_from_the_call():
    """An int attribute of an object that differs between calls becomes a symbolic input at the
    recompile (automatic dynamic); the int returned and written back is computed from the value
    the attribute had when the call started (the writeback replayed first used to change it:
    the returned count came out one too high)."""
    be = RecordingBackend()
    cf = capture(_step, be)
    for start in (0, 5, 9, 20):
        x = torch.randn(3)
        mine, theirs = _Steps(start), _Steps(start)
        got, want = cf(x, mine), _step(x, theirs)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] == start + 1 and mine.count == theirs.count
    assert len(be.graphs) == 2  # the first value, then one symbolic graph for the rest


def test_dynamic_true_makes_a_changed_int_symbolic_at_the_recompile():
    """``dynamic=True`` keeps ints constant at first (a size is what it makes symbolic) but,
    as automatic dynamic does, an int that changed becomes symbolic at the recompile, an
    argument or an object's attribute (a static cache's length per prompt): 2 graphs for 4
    values (one per value before)."""

    def scaled(x, n, state):
        return x[:, :n] * state.count + n

    be = RecordingBackend()
    cf = capture(scaled, be, dynamic=True)
    for n in (3, 4, 5, 6):
        x = torch.randn(4, 8)
        got, want = cf(x, n, _Steps(n + 1)), scaled(x, n, _Steps(n + 1))
        torch.testing.assert_close(got, want)
    assert len(be.graphs) == 2
