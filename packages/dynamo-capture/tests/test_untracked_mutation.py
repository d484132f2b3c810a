"""Mutations of objects capture reaches without a source (through a partial, a hook, a closure of
a class-level function, a set held as a constant): each is either written back or run in Python,
never lost. Every program is checked against eager for its result and its side effects."""

from __future__ import annotations

import functools

import pytest
import torch
from torchkiln_dynamo_capture import capture


def _run_twice(make):
    """(compiled state, eager state) after two calls of the program ``make()`` builds."""
    fn_c, state_c = make()
    fn_e, state_e = make()
    compiled = capture(fn_c, lambda gm, example_inputs: gm.forward)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), fn_e(x))
    return state_c, state_e


def _partial_list():
    seen = []
    p = functools.partial(lambda lst, t: lst.append(1) or t + 1, seen)
    return (lambda t: p(t)), seen


def _callable_object_closure():
    counts = {}

    class Counter:
        def __call__(self, t):
            counts["calls"] = counts.get("calls", 0) + 1
            return t * 2

    obj = Counter()
    return (lambda t: obj(t)), counts


def _module_forward_closure():
    seen = []

    class Logs(torch.nn.Module):
        def forward(self, t):
            seen.append(3)
            return t

    model = torch.nn.Sequential(Logs())
    return (lambda t: model(t) * 2), seen


def _closure_set():
    marks = set()

    def f(t):
        marks.add(1)
        return t + 1

    return f, marks


def _mutable_default():
    seen = []

    def f(t, acc=seen):
        acc.append(1)
        return t + 1

    return f, seen


def _hook_closure_list():
    seen = []
    torch.manual_seed(0)  # the compiled and the eager program get the same weights
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    model[1].register_forward_hook(lambda mod, args, out: seen.append(1) or out * 0.5)
    return model, seen


@pytest.mark.parametrize(
    "make",
    [
        _partial_list,
        _callable_object_closure,
        _module_forward_closure,
        _closure_set,
        _mutable_default,
        _hook_closure_list,
    ],
    ids=lambda m: m.__name__.strip("_"),
)
def test_side_effect_is_kept(make):
    compiled_state, eager_state = _run_twice(make)
    assert compiled_state == eager_state and eager_state
