"""Guards on plain values and modules: pass, fail, and the reason text."""

import enum

import pytest
import torch
from torchkiln_guards import (
    AttrSource,
    ClosureCellMatch,
    ClosureSource,
    ConstantMatch,
    DictKeysMatch,
    HasAttr,
    IdMatch,
    LengthMatch,
    LocalSource,
    ModuleHooksMatch,
    ModuleTrainingMatch,
    TypeMatch,
)

V = LocalSource("v")


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def g(v, x):
    return x * 2


def test_type_match(h):
    cg = h.build(g, [TypeMatch(V, int)])
    x = torch.randn(3)
    h.expect_pass(cg, 5, x)
    h.expect_fail(cg, "type(L['v']): expected int, got bool", True, x)
    h.expect_fail(cg, "type(L['v']): expected int, got torch.Tensor", x, x)


def test_id_match(h):
    lin = torch.nn.Linear(2, 2)
    cg = h.build(g, [IdMatch(V, lin)])
    x = torch.randn(2)
    h.expect_pass(cg, lin, x)
    other = torch.nn.Linear(2, 2)
    failure = h.expect_fail(cg, None, other, x)
    assert str(failure).startswith("L['v']: expected <torch.nn.Linear object> (id ")
    cg = h.build(g, [IdMatch(V, torch.relu), IdMatch(LocalSource("x"), None)])
    h.expect_pass(cg, torch.relu, None)
    h.expect_fail(cg, None, torch.sigmoid, None)
    cg = h.build(g, [IdMatch(V, torch.nn.Linear)])
    h.expect_pass(cg, torch.nn.Linear, x)
    failure = h.expect_fail(cg, None, torch.nn.Conv2d, x)
    assert "torch.nn.Linear" in str(failure) and "torch.nn.Conv2d" in str(failure)


@pytest.mark.parametrize(
    "value, same, different, reason",
    [
        (3, 3, 4, "L['v']: expected 3, got 4"),
        (3, 3, 3.0, "L['v']: expected 3, got 3.0"),
        (1, 1, True, "L['v']: expected 1, got True"),
        (0.5, 0.5, 0.25, "L['v']: expected 0.5, got 0.25"),
        (float("nan"), float("nan"), 1.0, "L['v']: expected nan, got 1.0"),
        (float("inf"), float("inf"), 1.0, "L['v']: expected inf, got 1.0"),
        # signed zeros differ (1 / v tells them apart); any NaN matches NaN
        (0.0, 0.0, -0.0, "L['v']: expected 0.0, got -0.0"),
        (-0.0, -0.0, 0.0, "L['v']: expected -0.0, got 0.0"),
        (float("nan"), float("nan"), 0.0, "L['v']: expected nan, got 0.0"),
        (
            float("nan"),
            float("nan"),
            -float("nan"),
            "L['v']: expected nan, got nan [the sign bits differ]",
        ),
        (
            -float("nan"),
            -float("nan"),
            float("nan"),
            "L['v']: expected nan, got nan [the sign bits differ]",
        ),
        ((0.0, 1), (0.0, 1), (-0.0, 1), "L['v']: expected (0.0, 1), got (-0.0, 1)"),
        ((float("nan"), 1), (float("nan"), 1), (1.0, 1), "L['v']: expected (nan, 1), got (1.0, 1)"),
        (complex(0.0, -0.0), complex(0.0, -0.0), complex(0.0, 0.0), "L['v']: expected -0j, got 0j"),
        (True, True, False, "L['v']: expected True, got False"),
        ("mean", "mean", "sum", "L['v']: expected 'mean', got 'sum'"),
        ((1, 2), (1, 2), (1, 3), "L['v']: expected (1, 2), got (1, 3)"),
        ((1, 2), (1, 2), [1, 2], "L['v']: expected (1, 2), got [1, 2]"),
        (Color.RED, Color.RED, Color.BLUE, "L['v']: expected Color.RED, got Color.BLUE"),
        (
            torch.float32,
            torch.float32,
            torch.float16,
            "L['v']: expected torch.float32, got torch.float16",
        ),
        (
            torch.device("cpu"),
            torch.device("cpu"),
            torch.device("meta"),
            "L['v']: expected torch.device('cpu'), got torch.device('meta')",
        ),
        (None, None, 0, "L['v']: expected None, got 0"),
    ],
)
def test_constant_match(h, value, same, different, reason):
    cg = h.build(g, [ConstantMatch(V, value)])
    x = torch.randn(3)
    h.expect_pass(cg, same, x)
    h.expect_fail(cg, reason, different, x)
    torch.testing.assert_close(g(same, x), x * 2)


def test_constant_match_equality_is_exact():
    # a guard set deduplicates equal guards: 0.0 and -0.0 must stay two guards, NaNs of one sign one
    assert ConstantMatch(V, 0.0) != ConstantMatch(V, -0.0)
    assert len({ConstantMatch(V, 0.0), ConstantMatch(V, -0.0)}) == 2
    assert ConstantMatch(V, float("nan")) == ConstantMatch(V, float("nan"))
    assert ConstantMatch(V, float("nan")) != ConstantMatch(V, -float("nan"))
    assert ConstantMatch(V, 1) != ConstantMatch(V, 1.0)


def test_constant_match_rejects_mutable_values():
    with pytest.raises(TypeError, match="immutable constant"):
        ConstantMatch(V, [1, 2])


def test_length_and_dict_keys(h):
    cg = h.build(g, [LengthMatch(V, 2)])
    x = torch.randn(2)
    h.expect_pass(cg, [x, x], x)
    h.expect_pass(cg, (1, 2), x)
    h.expect_fail(cg, "len(L['v']): expected 2, got 3", [x, x, x], x)
    cg = h.build(g, [DictKeysMatch(V, ("a", "b"))])
    h.expect_pass(cg, {"a": 1, "b": x}, x)
    h.expect_fail(
        cg, "tuple(L['v'].keys()): expected ('a', 'b'), got ('b', 'a')", {"b": 1, "a": 2}, x
    )
    h.expect_fail(cg, "tuple(L['v'].keys()): expected ('a', 'b'), got ('a',)", {"a": 1}, x)
    cg = h.build(g, [DictKeysMatch(V, (Color.RED, 3))])
    h.expect_pass(cg, {Color.RED: 0, 3: 1}, x)
    h.expect_fail(cg, None, {Color.BLUE: 0, 3: 1}, x)


def test_has_attr(h):
    class Obj:
        pass

    a, b = Obj(), Obj()
    a.cache = 1
    x = torch.randn(2)
    cg = h.build(g, [HasAttr(V, "cache", True)])
    h.expect_pass(cg, a, x)
    h.expect_fail(cg, "hasattr(L['v'], 'cache'): expected True, got False", b, x)
    cg = h.build(g, [HasAttr(V, "cache", False)])
    h.expect_pass(cg, b, x)
    h.expect_fail(cg, "hasattr(L['v'], 'cache'): expected False, got True", a, x)


def test_module_training(h):
    m = torch.nn.Dropout(0.5)
    x = torch.randn(4)
    cg = h.build(g, [ModuleTrainingMatch(V, True)])
    h.expect_pass(cg, m, x)
    m.eval()
    h.expect_fail(cg, "L['v'].training: expected True, got False", m, x)
    torch.testing.assert_close(m(x), x)


def test_module_hooks(h):
    m = torch.nn.Linear(3, 3)
    x = torch.randn(3)
    cg = h.build(g, [ModuleHooksMatch(V, m)])
    h.expect_pass(cg, m, x)
    handle = m.register_forward_hook(lambda mod, inp, out: out * 2)
    failure = h.expect_fail(cg, None, m, x)
    assert failure.expr == "L['v']._forward_hooks" and failure.expected == ()
    handle.remove()
    h.expect_pass(cg, m, x)
    handle = m.register_forward_pre_hook(lambda mod, inp: None)
    assert h.expect_fail(cg, None, m, x).expr == "L['v']._forward_pre_hooks"
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda mod, inp, out: None)
    try:
        failure = h.expect_fail(cg, None, m, x)
        assert failure.expr == "torch.nn.modules.module._global_forward_hooks"
    finally:
        handle.remove()
    h.expect_pass(cg, m, x)
    # a module captured with a hook keeps passing while the hook stays
    handle = m.register_forward_hook(lambda mod, inp, out: out)
    cg = h.build(g, [ModuleHooksMatch(V, m)])
    h.expect_pass(cg, m, x)
    handle.remove()
    h.expect_fail(cg, None, m, x)


def _double(mod, inp, out):
    return out * 2


def _triple(mod, inp, out):
    return out * 3


def test_module_hooks_compare_the_hooks_not_their_handle_ids(h):
    """A module made anew on each call, with the same hook registered on it, holds the same hooks
    under new handle ids: the guard passes. Another hook, another order, or the same hook taking
    kwargs fails it."""

    def make(*hooks, **kw):
        m = torch.nn.ReLU()
        for hook in hooks:
            m.register_forward_hook(hook, **kw)
        return m

    x = torch.randn(3)
    cg = h.build(g, [ModuleHooksMatch(V, make(_double, _triple))])
    h.expect_pass(cg, make(_double, _triple), x)
    torch.testing.assert_close(make(_double, _triple)(x), torch.relu(x) * 6)
    assert h.expect_fail(cg, None, make(_triple, _double), x).expr == "L['v']._forward_hooks"
    h.expect_fail(cg, None, make(_double), x)
    h.expect_fail(cg, None, make(_double, _double), x)
    h.expect_fail(cg, None, make(_double, _triple, with_kwargs=True), x)
    h.expect_fail(cg, None, make(_double, _triple, always_call=True), x)
    m = make(_double)
    m.register_forward_hook(_triple, prepend=True)
    h.expect_fail(cg, None, m, x)


def test_attr_chain_of_module(h):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    src = AttrSource(V, "0")
    cg = h.build(g, [ModuleTrainingMatch(src, True), TypeMatch(src, torch.nn.Linear)])
    x = torch.randn(2)
    h.expect_pass(cg, model, x)
    model[0].train(False)
    h.expect_fail(cg, "L['v'].0.training: expected True, got False", model, x)


def test_closure_cell_match(h):
    n = 4
    act = torch.relu

    def f(x):
        return act(x) * n

    guards = [
        ClosureCellMatch(ClosureSource("n"), 4),
        ClosureCellMatch(ClosureSource("act"), torch.relu),
    ]
    cg = h.build(f, guards)
    x = torch.randn(5)
    torch.testing.assert_close(f(x), torch.relu(x) * 4)
    h.expect_pass(cg, x)
    n = 5
    h.expect_fail(cg, "C['n']: expected 4, got 5", x)
    n = 4
    act = torch.sigmoid
    failure = h.expect_fail(cg, None, x)
    assert failure.expr == "C['act']"
