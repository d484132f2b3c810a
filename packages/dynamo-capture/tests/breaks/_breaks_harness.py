"""The graph-break harness: runs each program eagerly and through ``capture`` and compares.

A program is registered with the ``@program(graphs=N, ...)`` decorator (or ``register(...)`` for
modules built by a factory). ``run_break_program`` checks, on two calls with fresh random inputs:
  - the return value equals eager's (tensors by ``assert_close`` with the same dtype, shape and
    requires_grad; Python values by equality; same container types),
  - the printed output (stdout, which also receives the corpus logger) is the same string, so the
    ORDER of prints relative to each other matches eager; the user's warnings are the same list,
  - an exception raised out of the function has the same type and message as eager's,
  - arguments mutated by the program and external state (``observe()`` after ``setup()`` reset
    it) equal eager's,
  - with ``grad=True``: the gradients of the inputs after ``sum(outputs).backward()`` equal eager's,
  - the counting backend was handed exactly ``graphs`` graphs by the first call and no new graph by
    the second call (same shapes, dtypes and Python values: a cache hit everywhere).

Graph counting rule (the contract, see README.md): the dynamic trace of tensor operations of one
call is cut at every break event; calling a user function whose body breaks is itself a break in
the caller; each maximal piece that holds at least one tensor operation is one graph.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torchkiln_dynamo_capture.testing import RecordingBackend


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def pos(*shape: int) -> torch.Tensor:
    """Strictly positive random values: a branch on ``x.sum() > 0`` always takes the same side."""
    return torch.rand(*shape) + 0.1


def neg(*shape: int) -> torch.Tensor:
    return -(torch.rand(*shape) + 0.1)


def x34() -> tuple:
    return (randn(3, 4),)


def xy34() -> tuple:
    return (randn(3, 4), randn(3, 4))


def p34() -> tuple:
    return (pos(3, 4),)


def n34() -> tuple:
    return (neg(3, 4),)


def g34() -> tuple:
    return (randn(3, 4).requires_grad_(),)


@dataclass(frozen=True)
class BreakProgram:
    """``make_fn()(*make_inputs(), **kwargs())`` must run as eager does, in ``graphs`` graphs."""

    make_fn: Callable[[], Any]
    make_inputs: Callable[[], tuple]
    graphs: int
    kind: str
    name: str
    kwargs: Callable[[], dict] | None = None
    setup: Callable[[], None] | None = None
    observe: Callable[[], Any] | None = None
    grad: bool = False
    source: Any = None  # the function whose lines explain() should point at
    raises: type[BaseException] | None = None  # what eager must raise (checked first)

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.name}"


REGISTRY: list[BreakProgram] = []


def _kind_of(module_name: str) -> str:
    return module_name.rsplit(".", 1)[-1].removeprefix("breaks_")


def program(
    graphs: int,
    inputs: Callable[[], tuple] = x34,
    *,
    kwargs: Callable[[], dict] | None = None,
    setup: Callable[[], None] | None = None,
    observe: Callable[[], Any] | None = None,
    grad: bool = False,
    name: str | None = None,
    raises: type[BaseException] | None = None,
) -> Callable:
    """Decorator: registers a plain function as a break program (the function is returned as is)."""

    def deco(fn: Callable) -> Callable:
        REGISTRY.append(
            BreakProgram(
                make_fn=lambda: fn,
                make_inputs=inputs,
                graphs=graphs,
                kind=_kind_of(fn.__module__),
                name=name or fn.__name__,
                kwargs=kwargs,
                setup=setup,
                observe=observe,
                grad=grad,
                source=fn,
                raises=raises,
            )
        )
        return fn

    return deco


def register(
    make_fn: Callable[[], Any],
    graphs: int,
    inputs: Callable[[], tuple] = x34,
    *,
    name: str,
    kind: str,
    setup: Callable[[], None] | None = None,
    observe: Callable[[], Any] | None = None,
    grad: bool = False,
    kwargs: Callable[[], dict] | None = None,
) -> None:
    """Registers a program whose callable is built fresh per test (an ``nn.Module``, a closure)."""
    REGISTRY.append(
        BreakProgram(
            make_fn=make_fn,
            make_inputs=inputs,
            graphs=graphs,
            kind=kind,
            name=name,
            kwargs=kwargs,
            setup=setup,
            observe=observe,
            grad=grad,
        )
    )


def ids(programs: list[BreakProgram]) -> list[str]:
    names = [p.id for p in programs]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate program names: {sorted(dupes)}"
    return names


# ----------------------------------------------------------------------------- comparison


def assert_same(actual: Any, expected: Any, where: str = "out") -> None:
    """Structural equality: same container types, tensors close (same dtype/shape/requires_grad)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: expected a tensor, got {actual!r}"
        assert actual.shape == expected.shape, (
            f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        )
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.requires_grad == expected.requires_grad, (
            f"{where}: requires_grad {actual.requires_grad} != {expected.requires_grad}"
        )
        torch.testing.assert_close(
            actual.detach(), expected.detach(), msg=lambda m: f"{where}: {m}", equal_nan=True
        )
        return
    if isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), (
            f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
        )
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
        return
    if isinstance(expected, dict):
        assert type(actual) is type(expected), (
            f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
        )
        assert list(actual.keys()) == list(expected.keys()), (
            f"{where}: keys {list(actual.keys())} != {list(expected.keys())}"
        )
        for k in expected:
            assert_same(actual[k], expected[k], f"{where}[{k!r}]")
        return
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        assert type(actual) is type(expected), f"{where}: type {type(actual).__name__} differs"
        for f in dataclasses.fields(expected):
            assert_same(getattr(actual, f.name), getattr(expected, f.name), f"{where}.{f.name}")
        return
    if hasattr(expected, "__dict__") and type(expected).__module__.startswith("breaks_"):
        assert type(actual) is type(expected), f"{where}: type {type(actual).__name__} differs"
        assert_same(vars(actual), vars(expected), f"{where}.__dict__")
        return
    if isinstance(expected, float) and not isinstance(actual, bool):
        assert type(actual) is float, f"{where}: expected a float, got {actual!r}"
        assert math.isclose(actual, expected, rel_tol=1e-5, abs_tol=1e-6) or (
            math.isnan(actual) and math.isnan(expected)
        ), f"{where}: {actual!r} != {expected!r}"
        return
    assert type(actual) is type(expected), (
        f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
    )
    assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@dataclass
class Outcome:
    result: Any
    printed: str
    error: BaseException | None
    warned: list[str]
    grad_mode_after: bool = True


def run_one(fn: Callable, args: tuple, kwargs: dict) -> Outcome:
    """Calls ``fn`` with stdout captured; an exception is kept, not raised."""
    buf = io.StringIO()
    result, error = None, None
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(buf):
        warnings.simplefilter("always")
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001  (compared against eager's exception below)
            error = e
    grad_mode_after = torch.is_grad_enabled()
    # a break inside a with block must not leak its mode out of the call; restore for the next run
    torch.set_grad_enabled(True)
    return Outcome(result, buf.getvalue(), error, [str(w.message) for w in caught], grad_mode_after)


def _tensors_requiring_grad(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.requires_grad else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_requiring_grad(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_requiring_grad(v)]
    return []


def _grads(args: tuple) -> list:
    return [a.grad for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def compare_call(p: BreakProgram, fn: Callable, compiled: Callable, tag: str) -> Outcome:
    """One call of eager and captured on copies of the same fresh inputs; returns captured's outcome."""
    inputs = p.make_inputs()
    kwargs = p.kwargs() if p.kwargs else {}
    args_e, kw_e = copy.deepcopy((inputs, kwargs))
    args_c, kw_c = copy.deepcopy((inputs, kwargs))
    if p.setup:
        p.setup()
    eager = run_one(fn, args_e, kw_e)
    if p.raises is None:
        assert eager.error is None, f"{tag}: the program is wrong: eager raised {eager.error!r}"
    else:
        assert type(eager.error) is p.raises, (
            f"{tag}: the program is wrong: eager raised {eager.error!r}, not {p.raises.__name__}"
        )
    state_e = copy.deepcopy(p.observe()) if p.observe else None
    if p.setup:
        p.setup()
    got = run_one(compiled, args_c, kw_c)
    notes = f" (capture warned: {got.warned})" if got.warned else ""
    if eager.error is not None:
        assert got.error is not None, (
            f"{tag}: eager raised {eager.error!r}, captured returned {got.result!r}{notes}"
        )
        assert type(got.error) is type(eager.error) and str(got.error) == str(eager.error), (
            f"{tag}: raised {got.error!r}, eager raised {eager.error!r}{notes}"
        )
    else:
        if got.error is not None:
            raise AssertionError(f"{tag}: captured raised {got.error!r}{notes}") from got.error
        assert_same(got.result, eager.result, f"{tag}: output{notes}")
    assert got.grad_mode_after == eager.grad_mode_after, (
        f"{tag}: grad mode after the call is {got.grad_mode_after}, eager left {eager.grad_mode_after}"
    )
    user_warnings = [w for w in got.warned if not w.startswith("torchkiln")]
    assert user_warnings == eager.warned, (
        f"{tag}: warnings differ: eager {eager.warned}, captured {got.warned}"
    )
    assert got.printed == eager.printed, (
        f"{tag}: printed output differs{notes}\n--- eager ---\n{eager.printed}"
        f"--- captured ---\n{got.printed}"
    )
    assert_same(args_c, args_e, f"{tag}: mutated args")
    assert_same(kw_c, kw_e, f"{tag}: mutated kwargs")
    if p.observe:
        assert_same(p.observe(), state_e, f"{tag}: side-effect state")
    if p.grad and eager.error is None:
        outs_e = _tensors_requiring_grad(eager.result)
        outs_c = _tensors_requiring_grad(got.result)
        assert len(outs_c) == len(outs_e), f"{tag}: outputs requiring grad differ"
        if outs_e:
            sum(o.sum() for o in outs_e).backward()
            sum(o.sum() for o in outs_c).backward()
            assert_same(_grads(args_c), _grads(args_e), f"{tag}: input grads")
    return got


def run_break_program(p: BreakProgram) -> None:
    from torchkiln_dynamo_capture import capture

    fn = p.make_fn()
    backend = RecordingBackend()
    compiled = capture(fn, backend)
    first = compare_call(p, fn, compiled, "first call")
    notes = f"; capture warned: {first.warned}" if first.warned else ""
    assert backend.calls == p.graphs, (
        f"first call: {backend.calls} graphs, expected {p.graphs}{notes}"
    )
    with _recompile_reasons() as reasons:
        compare_call(p, fn, compiled, "second call")
    assert backend.calls == p.graphs, (
        f"second call with fresh same-shaped inputs compiled {backend.calls - p.graphs} new "
        f"graphs; recompile log: {reasons}"
    )


@contextlib.contextmanager
def _recompile_reasons():
    """Collects capture's "torchkiln.recompiles" log lines, so a failure says which guard missed."""
    lines: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("torchkiln.recompiles")
    handler, old_level = _Keep(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
