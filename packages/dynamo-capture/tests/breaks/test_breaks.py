"""Runs every graph-break program of the corpus eagerly and through capture (see README.md)."""

from __future__ import annotations

import contextlib
import io

import breaks_combined  # noqa: F401  (each import registers its programs)
import breaks_comprehensions  # noqa: F401
import breaks_control  # noqa: F401
import breaks_loops  # noqa: F401
import breaks_modules  # noqa: F401
import breaks_nested  # noqa: F401
import breaks_numpy_item  # noqa: F401
import breaks_print  # noqa: F401
import breaks_side_effects  # noqa: F401
import breaks_stack  # noqa: F401
import breaks_with_try  # noqa: F401
import pytest
import torch
from _breaks_harness import REGISTRY, ids, run_break_program
from known_gaps import KNOWN_GAPS
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.testing import RecordingBackend

PROGRAMS = sorted((p for p in REGISTRY if p.id not in KNOWN_GAPS), key=lambda p: p.id)


def test_corpus_size():
    kinds = {p.kind for p in PROGRAMS}
    assert len(PROGRAMS) >= 120, len(PROGRAMS)
    assert kinds >= {
        "print",
        "control",
        "loops",
        "nested",
        "with_try",
        "comprehensions",
        "numpy_item",
        "modules",
        "side_effects",
        "stack",
        "combined",
    }


@pytest.mark.parametrize("p", PROGRAMS, ids=ids(PROGRAMS))
def test_break_program(p):
    run_break_program(p)


def _branch(x):
    y = x * 2
    if y.sum() > 0:
        return y + 1
    return y - 1


def test_branch_compiles_the_other_side_on_demand():
    """Only the taken side is compiled; the other side compiles when a later call takes it."""
    be = RecordingBackend()
    cf = capture(_branch, be)
    for sign, total in [(1, 2), (1, 2), (-1, 3), (-1, 3), (1, 3)]:
        x = sign * (torch.rand(3, 4) + 0.1)
        torch.testing.assert_close(cf(x), _branch(x))
        assert be.calls == total, f"sign {sign}: {be.calls} graphs, expected {total}"


def _scaled_print(x, n):
    y = x * n
    print("n", n)
    return y + n


def test_python_value_and_shape_changes_recompile_both_sides_of_the_break():
    """A new int or a new shape compiles both pieces again; values seen before hit their entries."""
    be = RecordingBackend()
    cf = capture(_scaled_print, be)
    steps = [((3, 4), 2, 2), ((3, 4), 2, 2), ((3, 4), 3, 4), ((5, 2), 3, 6), ((3, 4), 2, 6)]
    for shape, n, total in steps:
        x = torch.randn(*shape)
        out_e, out_c = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out_e):
            expected = _scaled_print(x, n)
        with contextlib.redirect_stdout(out_c):
            got = cf(x, n)
        torch.testing.assert_close(got, expected)
        assert out_c.getvalue() == out_e.getvalue()
        assert be.calls == total, f"shape {shape}, n={n}: {be.calls} graphs, expected {total}"
