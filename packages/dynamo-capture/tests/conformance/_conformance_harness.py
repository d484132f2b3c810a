"""The conformance harness: runs small programs eagerly and through capture, and compares.

A program is a ``Program(fn, make_inputs, graphs=1)`` record. ``run_program`` checks, for two
calls with fresh inputs from ``make_inputs``:
  - outputs equal eager (tensors by ``torch.testing.assert_close``, Python values by equality),
  - arguments mutated by the program end up equal to eager's (input mutation, list/dict args),
  - external state the program mutates (``observe()``) equals eager's, after ``setup()`` reset it,
  - the backend was called exactly ``graphs`` times after the first call, and not again after
    the second (a cache hit),
  - every graph handed to the backend follows contract C1 (checked on the torchkiln side only).

``run_guard_case`` checks that a change to something capture relied on (a global, attribute,
module flag, closure cell, dtype or shape) causes exactly one more backend call, with correct
results, and that the old entry is still used once the change is undone.

Set ``TORCHKILN_CONFORMANCE_PEER=dynamo`` to run the same programs through ``torch.compile`` as the
reference peer (that is how the expected graph counts were checked); the default runs
``torchkiln_dynamo_capture.capture``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torchkiln_dynamo_capture.testing import RecordingBackend

PEER = os.environ.get("TORCHKILN_CONFORMANCE_PEER", "torchkiln")


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


def x34() -> tuple:
    return (randn(3, 4),)


def xy34() -> tuple:
    return (randn(3, 4), randn(3, 4))


@dataclass(frozen=True)
class Program:
    """One small program: ``fn(*make_inputs(), **kwargs())`` captured into ``graphs`` graphs."""

    fn: Any
    make_inputs: Callable[[], tuple] = x34
    graphs: int = 1
    kwargs: Callable[[], dict] | None = None
    setup: Callable[[], None] | None = None
    observe: Callable[[], Any] | None = None
    rtol: float | None = None
    atol: float | None = None
    name: str | None = None

    @property
    def id(self) -> str:
        if self.name:
            return self.name
        fn = self.fn
        if isinstance(fn, torch.nn.Module):
            return type(fn).__name__
        return getattr(fn, "__name__", None) or type(fn).__name__


@dataclass(frozen=True)
class GuardCase:
    """A program plus a change to what it relied on; the change must cause one recompile.

    ``change()`` alters state (a global, attribute, flag, closure cell); ``restore()`` undoes it.
    ``changed_inputs`` gives inputs of another dtype/shape instead (or as well).
    """

    fn: Any
    make_inputs: Callable[[], tuple] = x34
    change: Callable[[], None] | None = None
    restore: Callable[[], None] | None = None
    changed_inputs: Callable[[], tuple] | None = None
    graphs: int = 1
    name: str | None = None

    @property
    def id(self) -> str:
        return self.name or getattr(self.fn, "__name__", None) or type(self.fn).__name__


def ids(programs: list) -> list[str]:
    names = [p.id for p in programs]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate program names: {sorted(dupes)}"
    return names


def compile_with(fn: Any, backend: RecordingBackend) -> Callable:
    if PEER == "dynamo":  # the reference peer, never used by default
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(fn, backend=backend, fullgraph=True)
    from torchkiln_dynamo_capture import capture

    return capture(fn, backend, fullgraph=True)


# ----------------------------------------------------------------------------- comparison


def assert_same(
    actual: Any, expected: Any, *, rtol: float | None, atol: float | None, where: str = "out"
) -> None:
    """Structural equality: same container types, tensors close (same dtype/shape), values equal."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), (
            f"{where}: expected a tensor, got {type(actual).__name__}"
        )
        assert actual.shape == expected.shape, (
            f"{where}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        )
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.requires_grad == expected.requires_grad, f"{where}: requires_grad differs"
        torch.testing.assert_close(
            actual.detach(), expected.detach(), rtol=rtol, atol=atol, msg=lambda m: f"{where}: {m}"
        )
        return
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        assert type(actual) is type(expected), (
            f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
        )
        for f in dataclasses.fields(expected):
            assert_same(
                getattr(actual, f.name),
                getattr(expected, f.name),
                rtol=rtol,
                atol=atol,
                where=f"{where}.{f.name}",
            )
        if isinstance(expected, dict):  # ModelOutput: an OrderedDict dataclass
            assert list(actual.keys()) == list(expected.keys()), (
                f"{where}: keys {list(actual.keys())} != {list(expected.keys())}"
            )
        return
    if isinstance(expected, (list, tuple)):
        assert type(actual) is type(expected), (
            f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
        )
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, rtol=rtol, atol=atol, where=f"{where}[{i}]")
        return
    if isinstance(expected, dict):
        assert type(actual) is type(expected), (
            f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
        )
        assert list(actual.keys()) == list(expected.keys()), (
            f"{where}: keys {list(actual.keys())} != {list(expected.keys())}"
        )
        for k in expected:
            assert_same(actual[k], expected[k], rtol=rtol, atol=atol, where=f"{where}[{k!r}]")
        return
    if isinstance(expected, (set, frozenset)):
        assert type(actual) is type(expected) and actual == expected, (
            f"{where}: {actual!r} != {expected!r}"
        )
        return
    if isinstance(expected, float) and not isinstance(actual, bool):
        assert isinstance(actual, (float, int)), (
            f"{where}: expected float, got {type(actual).__name__}"
        )
        assert type(actual) is type(expected), f"{where}: type {type(actual).__name__} != float"
        assert math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-9) or (
            math.isnan(actual) and math.isnan(expected)
        ), f"{where}: {actual!r} != {expected!r}"
        return
    if (
        isinstance(expected, torch.nn.Module)
        or callable(expected)
        and not isinstance(expected, type)
    ):
        assert actual is expected, f"{where}: {actual!r} is not {expected!r}"
        return
    assert type(actual) is type(expected), (
        f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
    )
    assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def _module_of(fn: Any) -> torch.nn.Module | None:
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def _check_params_are_get_attr(gm: torch.fx.GraphModule, ex: list, module: torch.nn.Module) -> None:
    """C1: parameters/buffers are get_attr nodes bound to the user's very objects, not inputs."""
    owned = {id(t) for t in module.parameters()} | {id(t) for t in module.buffers()}
    for t in ex:
        assert id(t) not in owned, "a module parameter/buffer was passed as a graph input"
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        obj = gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        if isinstance(obj, torch.nn.Parameter):
            assert id(obj) in owned, f"get_attr {node.target} is a copy, not the module's Parameter"


def _check_contract_c1(backend: RecordingBackend, since: int, fn: Any = None) -> None:
    """Contract C1 on each new graph: real example inputs, one per placeholder, example_value metas."""
    if PEER != "torchkiln":
        return
    from torch._subclasses.fake_tensor import FakeTensor

    module = _module_of(fn)

    for gm, ex in zip(backend.graphs[since:], backend.example_inputs[since:]):
        assert isinstance(gm, torch.fx.GraphModule), (
            f"backend got {type(gm).__name__}, not a GraphModule"
        )
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        assert len(placeholders) == len(ex), (
            f"{len(placeholders)} placeholders but {len(ex)} example inputs"
        )
        for t, ph in zip(ex, placeholders):
            if isinstance(ph.meta.get("example_value"), torch.SymInt):
                # an int input of symbolic value (automatic dynamic): its real int
                assert type(t) is int, f"a SymInt placeholder's example input is {type(t).__name__}"
                continue
            assert isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor), (
                "example_inputs must be real tensors"
            )
        for node in gm.graph.nodes:
            if node.op != "output":
                assert "example_value" in node.meta, (
                    f"node {node.format_node()} has no meta['example_value']"
                )
        (out,) = [n for n in gm.graph.nodes if n.op == "output"]
        assert isinstance(out.args[0], (tuple, list)), (
            "graph output must be a flat tuple of tensors"
        )
        if module is not None:
            _check_params_are_get_attr(gm, ex, module)


def _call(fn: Any, args: tuple, kwargs: dict) -> Any:
    return fn(*args, **kwargs)


def _one_run(
    program: Any, compiled: Callable, inputs: tuple, kwargs: dict, *, rtol: Any, atol: Any, tag: str
) -> None:
    setup = getattr(program, "setup", None)
    observe = getattr(program, "observe", None)
    args_e, kw_e = copy.deepcopy((inputs, kwargs))
    args_c, kw_c = copy.deepcopy((inputs, kwargs))
    if setup:
        setup()
    expected = _call(program.fn, args_e, kw_e)
    expected_state = copy.deepcopy(observe()) if observe else None
    if setup:
        setup()
    actual = _call(compiled, args_c, kw_c)
    assert_same(actual, expected, rtol=rtol, atol=atol, where=f"{tag}: output")
    assert_same(args_c, args_e, rtol=rtol, atol=atol, where=f"{tag}: mutated args")
    assert_same(kw_c, kw_e, rtol=rtol, atol=atol, where=f"{tag}: mutated kwargs")
    if observe:
        assert_same(
            observe(), expected_state, rtol=rtol, atol=atol, where=f"{tag}: side-effect state"
        )


def run_program(program: Program) -> None:
    backend = RecordingBackend()
    compiled = compile_with(program.fn, backend)
    tol = {"rtol": program.rtol, "atol": program.atol}
    kwargs = program.kwargs or dict
    torch.manual_seed(0)
    _one_run(program, compiled, program.make_inputs(), kwargs(), tag="first call", **tol)
    assert backend.calls == program.graphs, (
        f"first call: {backend.calls} backend calls, expected {program.graphs}"
    )
    _check_contract_c1(backend, 0, program.fn)
    _one_run(program, compiled, program.make_inputs(), kwargs(), tag="second call", **tol)
    assert backend.calls == program.graphs, (
        f"second call with fresh inputs of the same shape/dtype recompiled: {backend.calls} backend calls"
    )


def run_guard_case(case: GuardCase) -> None:
    backend = RecordingBackend()
    compiled = compile_with(case.fn, backend)
    tol = {"rtol": None, "atol": None}
    changed_inputs = case.changed_inputs or case.make_inputs
    g = case.graphs
    if case.restore:
        case.restore()
    try:
        _one_run(case, compiled, case.make_inputs(), {}, tag="original", **tol)
        assert backend.calls == g, f"original: {backend.calls} backend calls, expected {g}"
        # checked while the state each graph was captured in still holds (e.g. the same submodule)
        _check_contract_c1(backend, 0, case.fn)
        _one_run(case, compiled, case.make_inputs(), {}, tag="original again", **tol)
        assert backend.calls == g, f"original again: recompiled ({backend.calls} backend calls)"
        if case.change:
            case.change()
        _one_run(case, compiled, changed_inputs(), {}, tag="after the change", **tol)
        assert backend.calls == g + 1, (
            f"after the change: {backend.calls} backend calls, expected {g + 1} (exactly one recompile)"
        )
        _check_contract_c1(backend, g, case.fn)
        _one_run(case, compiled, changed_inputs(), {}, tag="changed again", **tol)
        assert backend.calls == g + 1, (
            f"changed again: {backend.calls} backend calls, expected a cache hit"
        )
    finally:
        if case.restore:
            case.restore()
    _one_run(case, compiled, case.make_inputs(), {}, tag="restored", **tol)
    assert backend.calls == g + 1, (
        f"restored: {backend.calls} backend calls; the first entry should still hit"
    )
