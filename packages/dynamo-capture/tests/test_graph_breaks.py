"""Graph breaks: the split frame (graph, step, resume_at_N) keeps eager's semantics.

The large program corpus is in tests/breaks/; these tests pin the mechanism: the code objects,
liveness, grad mode across a break, exceptions, logs, explain and the recompile limit in loops.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import types
import warnings

import pytest
import torch
from torchkiln_dynamo_capture import RecompileLimitExceeded, Unsupported, capture, explain
from torchkiln_dynamo_capture.bytecode import decode
from torchkiln_dynamo_capture.bytecode.liveness import live_in
from torchkiln_dynamo_capture.bytecode.resume import NULL, VALUE, resume_code
from torchkiln_dynamo_capture.testing import RecordingBackend


def _run(fn, *args):
    """(result, printed text) of one call."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return result, out.getvalue()


def _same(a, b):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
        assert a.requires_grad == b.requires_grad
        torch.testing.assert_close(a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b


def _target(x, n):
    y = x * 2
    z = y + n
    return z.sum()


def test_resume_code_continues_the_frame_with_stack_and_locals():
    insts = decode(_target.__code__)
    # continue right after ``z = y + n`` is computed, before it is stored: the sum is on the stack
    store_z = next(i.index for i in insts if i.opname == "STORE_FAST" and i.argval == "z")
    code = resume_code(_target.__code__, store_z, (VALUE,), (), "resume_at_test")
    fn = types.FunctionType(code, globals())
    z = torch.randn(5)
    torch.testing.assert_close(fn(z), z.sum())
    assert code.co_name == "resume_at_test" and code.co_argcount == 1


def test_resume_code_recreates_null_slots():
    def f(x):
        return torch.relu(x.neg())

    insts = decode(f.__code__)
    # before the outer call: [NULL, torch.relu, <neg result>] (3.11 and 3.12 alike)
    call = next(
        i.index
        for i in insts
        if i.opname == "CALL" and i.arg == 1 and insts[i.index - 1].opname != "LOAD_ATTR"
    )
    first = call - 1 if insts[call - 1].opname == "PRECALL" else call
    code = resume_code(f.__code__, first, (NULL, VALUE, VALUE), (), "resume_at_call")
    x = torch.randn(4)
    torch.testing.assert_close(types.FunctionType(code, globals())(torch.relu, x.neg()), f(x))


def test_liveness_drops_dead_locals():
    def f(a, b):
        c = a + 1
        d = c * 2  # noqa: F841 - dead on purpose
        return b + c

    insts = decode(f.__code__)
    live = live_in(f.__code__)
    at_d = next(i.index for i in insts if i.opname == "STORE_FAST" and i.argval == "d")
    assert live[at_d] == frozenset({"b", "c"})


def test_print_splits_the_frame_and_keeps_output_order():
    def f(x):
        y = x.sin()
        print("between", y.shape)
        return y.cos()

    be = RecordingBackend()
    cf = capture(f, be)
    x = torch.randn(3)
    expected, expected_out = _run(f, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actual, actual_out = _run(cf, x)
    _same(actual, expected)
    assert actual_out == expected_out and len(be.graphs) == 2
    actual, _ = _run(cf, torch.randn(3))  # reuse: nothing new compiled
    assert len(be.graphs) == 2


def test_mutations_before_the_break_are_visible_to_the_code_run_in_python():
    def f(x, log):
        log.append("first")
        print(len(log))
        log.append("second")
        return x + len(log)

    cf = capture(f, RecordingBackend())
    log_e, log_c = [], []
    expected, out_e = _run(f, torch.ones(2), log_e)
    actual, out_c = _run(cf, torch.ones(2), log_c)
    _same(actual, expected)
    assert log_c == log_e and out_c == out_e == "1\n"


@pytest.mark.parametrize("requires_grad", [True, False])
def test_grad_mode_inside_with_block_across_the_break(requires_grad):
    def f(x):
        with torch.no_grad():
            y = x * 2
            print(torch.is_grad_enabled())
            z = y + 1
        return z, x * 3, torch.is_grad_enabled()

    be = RecordingBackend()
    cf = capture(f, be)
    x = torch.randn(3, requires_grad=requires_grad)
    expected, out_e = _run(f, x)
    actual, out_c = _run(cf, x)
    _same(actual, expected)
    assert out_c == out_e == "False\n" and torch.is_grad_enabled()


def test_exception_after_a_break_is_caught_by_the_users_handler():
    def may_fail(y):
        print("checking")
        if y.shape[0] == 3:
            raise ValueError("three")
        return y

    def f(x):
        y = x + 1
        try:
            y = may_fail(y)
        except ValueError as e:
            return y * 2, str(e)
        return y, "ok"

    cf = capture(f, RecordingBackend())
    for n in (3, 4):
        x = torch.randn(n)
        expected, out_e = _run(f, x)
        actual, out_c = _run(cf, x)
        _same(actual, expected)
        assert out_c == out_e


def test_uncaught_exception_is_the_users_and_code_before_it_ran_once():
    def f(x):
        print("before")
        if x.sum() > -1e9:
            raise KeyError("mine")
        return x

    cf = capture(f, RecordingBackend())
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(KeyError, match="mine"):
        cf(torch.randn(3))
    assert out.getvalue() == "before\n"


def test_graph_break_log_names_the_users_line(monkeypatch, caplog):
    def f(x):
        y = x.relu()
        print("log me")
        return y + 1

    monkeypatch.setenv("TORCHKILN_LOGS", "graph_breaks")
    with (
        caplog.at_level(logging.INFO, logger="torchkiln.graph_breaks"),
        contextlib.redirect_stdout(io.StringIO()),
    ):
        capture(f, RecordingBackend())(torch.randn(2))
    line = f.__code__.co_firstlineno + 2
    assert any(
        f"{__file__}:{line}" in r.getMessage() and "print()" in r.getMessage()
        for r in caplog.records
    )


def test_fullgraph_still_raises_at_the_break():
    def f(x):
        print("no")
        return x

    with pytest.raises(Unsupported):
        capture(f, RecordingBackend(), fullgraph=True)(torch.randn(2))


def test_break_in_a_long_loop_is_correct_and_warns_once():
    def f(x, n):
        for i in range(n):
            x = x * 1.5
            print(i)
        return x

    be = RecordingBackend()
    cf = capture(f, be, recompile_limit=4)
    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        actual, out_c = _run(cf, x, 12)
    expected, out_e = _run(f, x, 12)
    _same(actual, expected)
    assert out_c == out_e
    limit = [m for m in w if issubclass(m.category, RecompileLimitExceeded)]
    assert len(limit) == 1 and "resume_at" in str(limit[0].message)


class _Printer(torch.nn.Module):
    def forward(self, x):
        print("printer", tuple(x.shape))
        return x + 1


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.seq = torch.nn.Sequential(_Printer(), torch.nn.ReLU())

    def forward(self, x):
        return self.seq(self.lin(x)) * 2


def test_module_whose_submodule_breaks():
    net = _Net()
    be = RecordingBackend()
    cm = capture(net, be)
    x = torch.randn(2, 4)
    expected, out_e = _run(net, x)
    actual, out_c = _run(cm, x)
    _same(actual, expected)
    assert out_c == out_e
    # Net.forward: [lin] | Sequential.forward: (Printer breaks at once) | Printer: [+1] | [relu] | [*2]
    assert len(be.graphs) == 4
    _run(cm, torch.randn(2, 4))
    assert len(be.graphs) == 4


def test_explain_reports_breaks_with_reason_place_and_hint():
    def helper(y):
        print("helper")
        return y * 3

    def f(x):
        y = x.relu()
        if y.sum() > 0:
            y = helper(y)
        return y + 1

    with contextlib.redirect_stdout(io.StringIO()):
        report = explain(f)(torch.ones(4))
    assert report.graph_count == 3 and report.graph_break_count == 3
    first = f.__code__.co_firstlineno
    assert [b.lineno for b in report.breaks] == [
        first + 2,
        first + 3,
        helper.__code__.co_firstlineno + 1,
    ]
    assert report.breaks[0].source_line == "if y.sum() > 0:" and all(b.hint for b in report.breaks)
    assert len(report.ops_per_graph) == 3 and len(report.guards) == 3 and all(report.guards)
    data = json.loads(json.dumps(report.to_dict()))
    assert data["graph_break_count"] == 3 and data["breaks"][2]["source_line"] == 'print("helper")'
    text = str(report)
    assert "3 graph(s), 3 graph break(s)" in text and "print()" in text


def test_eager_fallback_does_not_leak_the_capture_error_into_the_users_handler():
    """A frame capture cannot handle runs eagerly; inside it, a bare ``raise`` in an except clause
    and ``sys.exc_info()`` must see the user's exception, never capture's own error."""
    import sys

    from torchkiln_dynamo_capture import capture

    def f(x):
        class Local:  # a class statement: capture runs this frame eagerly
            pass

        try:
            raise KeyError("user")
        except KeyError:
            assert sys.exc_info()[0] is KeyError
            return x * 2, Local

    def g(x):
        class Local:
            pass

        try:
            raise ValueError("mine")
        except ValueError:  # noqa: TRY203 - the bare raise is what is tested
            raise

    x = torch.randn(3)
    with pytest.warns(UserWarning, match="eagerly"):
        out, _ = capture(f, lambda gm, ex: gm.forward)(x)
    torch.testing.assert_close(out, x * 2)
    with (
        pytest.warns(UserWarning, match="eagerly"),
        pytest.raises(ValueError, match="mine") as info,
    ):
        capture(g, lambda gm, ex: gm.forward)(x)
    assert info.value.__context__ is None


@pytest.mark.parametrize("grad", [False, True])
def test_requires_grad_in_place_breaks_and_keeps_eagers_flags(grad):
    """``t.requires_grad_()`` is no value a graph computes: it breaks the graph and runs in
    Python. As a node, the ATen trace refused it (transformers' MRA ran wholly eagerly)."""

    def f(x):
        z = torch.zeros_like(x).requires_grad_()
        return z, (z[:, :2] * x[:, :2]).sum(-1), x + 1

    be = RecordingBackend()
    cf = capture(f, be)
    with torch.set_grad_enabled(grad):
        x = torch.randn(3, 4)
        got, want = cf(x), f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.requires_grad == w.requires_grad
    assert explain(f)(x).graph_break_count == 1
    with pytest.raises(Unsupported, match="requires_grad_"):
        capture(f, RecordingBackend(), fullgraph=True)(x)


def test_the_steps_of_a_break_are_the_programs_code():
    """A break's step and its continuation are registered as the program's own code
    (``CodeRegistry.runs_the_program``): an error raised there is the program's, not capture's,
    even when the function broken is a library's."""

    def f(x):
        y = x * 2
        print(end="")
        return y + 1

    cf = capture(f, RecordingBackend())
    cf(torch.randn(3))
    codes = cf.ctx.codes
    made = [fn.__code__ for fn in cf.ctx._steps.values()]
    assert made and all(codes.runs_the_program(c) for c in made)
    assert not codes.runs_the_program(f.__code__)


def test_a_local_python_cannot_name_as_a_parameter_is_live_across_a_break():
    """pytest's rewritten asserts keep ``@py_assert1`` among a test function's locals: live at a
    break, it is a parameter of the continuation and the step, which rename it (the
    continuation's capture failed, ``'@py_assert1' is not a valid parameter name``, and it ran
    eagerly with a warning). Twice: the continuation breaks again with the local still live."""

    def f(x):
        tmp = x + 1
        print("first")
        y = tmp.sin()
        print("second")
        return (y + tmp).cos()

    code = f.__code__
    f.__code__ = code.replace(
        co_varnames=tuple("@py_assert1" if n == "tmp" else n for n in code.co_varnames)
    )
    be = RecordingBackend()
    cf = capture(f, be)
    x = torch.randn(3)
    expected, expected_out = _run(f, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "running ... eagerly"
        actual, actual_out = _run(cf, x)
        _same(actual, expected)
        assert actual_out == expected_out == "first\nsecond\n" and len(be.graphs) == 3
        y = torch.randn(3)
        _same(_run(cf, y)[0], f(y))
    assert len(be.graphs) == 3
