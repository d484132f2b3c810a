"""explain() on programs with graph breaks: counts equal the counting backend's, breaks are located.

Each break must carry ``reason``, ``filename``, ``lineno``, ``source_line`` and ``hint``; the line
is the user's line in the program file; ``str(report)`` names it; ``to_dict()`` survives JSON.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import warnings
from pathlib import Path

import breaks_combined  # noqa: F401  (each import registers its programs)
import breaks_comprehensions  # noqa: F401
import breaks_control
import breaks_loops
import breaks_modules
import breaks_nested
import breaks_numpy_item
import breaks_print
import breaks_side_effects  # noqa: F401
import breaks_stack  # noqa: F401
import breaks_with_try  # noqa: F401
import pytest
import torch
from _breaks_harness import REGISTRY, ids
from known_gaps import KNOWN_GAPS
from torchkiln_dynamo_capture import capture, explain
from torchkiln_dynamo_capture.testing import RecordingBackend


def _quiet(call):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return call()


def _explain(fn, *args, **kwargs):
    return _quiet(lambda: explain(fn)(*args, **kwargs))


def _line_of(fn, needle: str) -> int:
    """The absolute line number of the first line of ``fn`` containing ``needle``."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if needle in line:
            return start + i
    raise AssertionError(f"{needle!r} not in {fn.__name__}")


def _check_break_fields(b) -> None:
    for attr in ("reason", "filename", "lineno", "source_line", "hint"):
        assert hasattr(b, attr), f"a break has no .{attr}"
    assert isinstance(b.reason, str) and b.reason.strip()
    assert isinstance(b.hint, str) and b.hint.strip()
    assert isinstance(b.lineno, int)


# Programs whose explain() graph count is compared with the counting backend's, one call each.
_COUNTED = [
    p
    for p in REGISTRY
    if p.id not in KNOWN_GAPS
    if p.kind in {"print", "control", "loops", "nested", "modules"} and p.raises is None
]


@pytest.mark.parametrize("p", _COUNTED, ids=ids(_COUNTED))
def test_explain_graph_count_equals_counting_backend(p):
    inputs = p.make_inputs()
    kwargs = p.kwargs() if p.kwargs else {}
    args_x, kw_x = copy.deepcopy((inputs, kwargs))  # the program may mutate its arguments
    if p.setup:
        p.setup()
    report = _explain(p.make_fn(), *args_x, **kw_x)
    if p.setup:
        p.setup()
    be = RecordingBackend()
    _quiet(lambda: capture(p.make_fn(), be)(*inputs, **kwargs))
    assert report.graph_count == be.calls == p.graphs, (
        f"explain: {report.graph_count}, counting backend: {be.calls}, expected {p.graphs}"
    )
    assert len(report.ops_per_graph) == report.graph_count
    assert report.graph_break_count == len(report.breaks)
    for b in report.breaks:
        _check_break_fields(b)


def test_explain_print_break_is_located():
    fn = breaks_print.print_middle
    report = _explain(fn, torch.randn(3, 4))
    assert report.graph_count == 2 and report.graph_break_count == 1
    (b,) = report.breaks
    _check_break_fields(b)
    assert Path(b.filename).name == "breaks_print.py"
    assert b.lineno == _line_of(fn, 'print("middle")')
    assert b.source_line.strip() == 'print("middle")'
    text = str(report)
    assert "breaks_print.py" in text and str(b.lineno) in text


def test_explain_ops_per_graph_split_at_the_break():
    report = _explain(breaks_print.print_middle, torch.randn(3, 4))
    first, second = (str(ops) for ops in report.ops_per_graph)
    assert "sin" in first and "cos" not in first
    assert "cos" in second and "sin" not in second


def test_explain_tensor_branch_break_is_located():
    fn = breaks_control.if_sum_positive
    report = _explain(fn, torch.rand(3, 4) + 0.1)
    assert report.graph_count == 2 and report.graph_break_count == 1
    (b,) = report.breaks
    _check_break_fields(b)
    assert Path(b.filename).name == "breaks_control.py"
    assert b.lineno == _line_of(fn, "if x.sum() > 0:")


def test_explain_item_break_is_located():
    fn = breaks_numpy_item.item_of_deterministic_count
    report = _explain(fn, torch.randn(3, 4))
    assert report.graph_count == 2 and report.graph_break_count == 1
    (b,) = report.breaks
    assert b.lineno == _line_of(fn, ".item()")
    assert "item" in b.source_line


def test_explain_loop_breaks_once_per_iteration_at_the_same_line():
    fn = breaks_loops.print_after_op_in_for
    report = _explain(fn, torch.randn(3, 4))
    assert report.graph_count == 4
    assert report.graph_break_count == 3
    assert {b.lineno for b in report.breaks} == {_line_of(fn, "print(i)")}


def test_explain_nested_break_points_into_the_callee():
    report = _explain(breaks_nested.callee_breaks_in_middle, torch.randn(3, 4))
    assert report.graph_count == 4
    callee_line = _line_of(breaks_nested._h_print, 'print("h")')
    located = [(Path(b.filename).name, b.lineno) for b in report.breaks]
    assert ("breaks_nested.py", callee_line) in located, located


def test_explain_keyword_arguments():
    fn = breaks_nested.top_level_keyword_arguments
    report = _explain(fn, torch.randn(3, 4), factor=4.0, verbose=True)
    assert report.graph_count == 2 and report.graph_break_count == 1
    assert report.breaks[0].lineno == _line_of(fn, 'print("factor", factor)')


def test_explain_without_break():
    report = _explain(breaks_nested.keyword_arguments_callee_does_not_break, torch.randn(3, 4))
    assert report.graph_count == 1
    assert report.graph_break_count == 0 and list(report.breaks) == []
    assert len(report.ops_per_graph) == 1


def test_explain_module_with_printing_child():
    torch.manual_seed(0)
    model = breaks_modules.ParentOfPrintingChild()
    report = _explain(model, torch.randn(3, 4))
    assert report.graph_count == 4
    line = _line_of(breaks_modules.PrintLinear.forward, 'print("lin out"')
    assert line in {b.lineno for b in report.breaks}
    # two splits, each where the user's code is: the parent's call of the child, the child's
    # print (the module wrapper's own frame, which calls the parent, splits nothing)
    assert report.graph_break_count == 2
    assert {Path(b.filename).name for b in report.breaks} == {"breaks_modules.py"}


def test_explain_guards_are_reported():
    report = _explain(breaks_print.print_middle, torch.randn(3, 4))
    assert report.guards, "no guards reported"
    assert "x" in str(report.guards)


def test_explain_to_dict_round_trips_through_json():
    fn = breaks_print.print_three_segments
    report = _explain(fn, torch.randn(3, 4))
    d = report.to_dict()
    back = json.loads(json.dumps(d))
    assert back == d
    assert back["graph_count"] == report.graph_count == 3
    assert back["graph_break_count"] == report.graph_break_count == 2
    assert [b["lineno"] for b in back["breaks"]] == [
        _line_of(fn, "print(1)"),
        _line_of(fn, "print(2)"),
    ]
    for b in back["breaks"]:
        assert set(b) >= {"reason", "filename", "lineno", "source_line", "hint"}


def test_explain_runs_the_program_like_eager():
    """explain() runs the call: prints appear once each, in eager's order."""
    fn = breaks_print.print_four_times
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
        warnings.simplefilter("ignore")
        report = explain(fn)(torch.randn(3, 4))
    assert buf.getvalue() == "a\nb\nc\nd\n"
    assert report.graph_count == 4 and report.graph_break_count == 4
