"""compile_guards: dedup, order, generated source, argument binding, errors, logging."""

import inspect
import logging
import types

import pytest
import torch
from torchkiln_guards import (
    AttrSource,
    ConstantMatch,
    GlobalSource,
    GlobalStateMatch,
    GuardSet,
    IdMatch,
    ItemSource,
    LengthMatch,
    LocalSource,
    TensorMatch,
    TypeMatch,
    UnguardableSourceError,
    compile_guards,
)

X, Y = LocalSource("x"), LocalSource("y")


def add(x, y):
    return (x * y + 1).relu().sum()


def test_dedup_and_order(h):
    x, y = torch.randn(8), torch.randn(8)
    guards = [
        GlobalStateMatch.capture(),
        TensorMatch.from_tensor(X, x),
        TypeMatch(X, torch.Tensor),  # implied by the TensorMatch
        TensorMatch.from_tensor(X, x),  # duplicate
        TensorMatch.from_tensor(Y, y),
        IdMatch(GlobalSource("torch"), torch),
        GlobalStateMatch.capture(),  # duplicate
    ]
    gs = GuardSet(guards)
    kinds = [type(g).__name__ for g in gs]
    assert kinds == ["IdMatch", "TensorMatch", "TensorMatch", "GlobalStateMatch"]
    assert [g.source for g in gs.guards[1:3]] == [X, Y]
    cg = gs.compile(signature=inspect.signature(add), f_globals=add.__globals__)
    assert cg.guards == gs.guards
    h.expect_pass(cg, torch.randn(8), torch.randn(8))
    assert add(x, y) == (x * y + 1).relu().sum()


def test_generated_source_golden_and_runs(h):
    x, y = torch.randn(8), torch.randn(8)
    cg = h.build(add, [TensorMatch.from_tensor(X, x), TensorMatch.from_tensor(Y, y)])
    assert cg.source == (
        "def ___guard_check(x, y):\n"
        "    try:\n"
        "        # TensorMatch(L['x'])\n"
        "        if not (type(x) is ___type0 and x.dtype is ___dtype1 and x.is_cpu and x.shape == (8,)"
        " and x.is_contiguous() and x.storage_offset() == 0 and x.requires_grad is False):\n"
        "            return False\n"
        "        # TensorMatch(L['y'])\n"
        "        if not (type(y) is ___type0 and y.dtype is ___dtype1 and y.is_cpu and y.shape == (8,)"
        " and y.is_contiguous() and y.storage_offset() == 0 and y.requires_grad is False):\n"
        "            return False\n"
        "        return True\n"
        "    except Exception:\n"
        "        return False"
    )
    # the check is the generated function itself: no wrapper frame on the hot path
    assert type(cg.check) is types.FunctionType and cg.check.__name__ == "___guard_check"
    h.expect_pass(cg, torch.randn(8), torch.randn(8))
    h.expect_fail(cg, "L['y'].size()[0]: expected 8, got 9", torch.randn(8), torch.randn(9))


def test_attribute_chain_fetched_once(h):
    reads = []

    class Model:
        @property
        def cfg(self):
            reads.append(1)
            return self._cfg

    m = Model()
    m._cfg = types.SimpleNamespace(depth=3, width=4, name="x")
    cfg = AttrSource(LocalSource("self"), "cfg")

    def forward(self, x):
        return x

    guards = [
        ConstantMatch(AttrSource(cfg, "depth"), 3),
        ConstantMatch(AttrSource(cfg, "width"), 4),
        ConstantMatch(AttrSource(cfg, "name"), "x"),
    ]
    cg = h.build(forward, guards)
    assert cg.check(m, torch.randn(1)) is True
    assert len(reads) == 1
    assert cg.source.count("self.cfg") == 1
    m._cfg.width = 5
    h.expect_fail(cg, "L['self'].cfg.width: expected 4, got 5", m, torch.randn(1))


def test_parameter_binding_defaults_varargs_kwargs(h):
    def f(a, b=2, /, c=3, *rest, scale=1.5, flag, **extra):
        return a

    guards = [
        ConstantMatch(LocalSource("b"), 2),
        ConstantMatch(LocalSource("c"), 3),
        ConstantMatch(LocalSource("scale"), 1.5),
        ConstantMatch(LocalSource("flag"), True),
        LengthMatch(LocalSource("rest"), 0),
        LengthMatch(LocalSource("extra"), 1),
        TypeMatch(LocalSource("a"), int),
    ]
    cg = h.build(f, guards)
    assert (
        "def ___guard_check(a, b=___default_b, /, c=___default_c, *rest, scale=___default_scale, flag, **extra)"
        in cg.source
    )
    h.expect_pass(cg, 1, flag=True, z=0)
    h.expect_pass(cg, 1, 2, 3, flag=True, z=0)
    h.expect_fail(cg, "L['b']: expected 2, got 7", 1, 7, flag=True, z=0)
    h.expect_fail(cg, "len(L['rest']): expected 0, got 1", 1, 2, 3, 4, flag=True, z=0)
    h.expect_fail(cg, "L['scale']: expected 1.5, got 2.0", 1, flag=True, scale=2.0, z=0)
    h.expect_fail(cg, "len(L['extra']): expected 1, got 0", 1, flag=True)
    # arguments that do not fit the signature raise as the function itself would
    with pytest.raises(TypeError):
        cg.check(1)
    failure = cg.explain_failure(1)
    assert failure.guard is None and "flag" in str(failure)


def test_items_of_varargs_and_kwargs(h):
    def f(*args, **kwargs):
        return args

    x = torch.randn(2, 3)
    guards = [
        TensorMatch.from_tensor(
            __import__("torchkiln_guards").ItemSource(LocalSource("args"), 0), x
        ),
        ConstantMatch(
            __import__("torchkiln_guards").ItemSource(LocalSource("kwargs"), "mode"), "fast"
        ),
    ]
    cg = h.build(f, guards)
    h.expect_pass(cg, torch.randn(2, 3), mode="fast")
    h.expect_fail(
        cg, "L['kwargs']['mode']: expected 'fast', got 'slow'", torch.randn(2, 3), mode="slow"
    )
    failure = h.expect_fail(cg, None, mode="fast")
    assert failure.expr == "L['args'][0]" and "IndexError" in str(failure)


def test_unguardable_local_and_missing_cell_raise_typed_errors():
    with pytest.raises(UnguardableSourceError, match="not a parameter"):
        compile_guards(
            [ConstantMatch(LocalSource("tmp"), 1)], signature=inspect.signature(add), f_globals={}
        )
    from torchkiln_guards import ClosureSource, GuardCompileError

    with pytest.raises(GuardCompileError, match="closure cell"):
        compile_guards(
            [ConstantMatch(ClosureSource("n"), 1)], signature=inspect.signature(add), f_globals={}
        )


def test_errors_while_checking_fail_never_raise(h):
    class Broken:
        @property
        def training(self):
            raise RuntimeError("boom")

    from torchkiln_guards import ModuleTrainingMatch

    def f(m):
        return m

    cg = h.build(
        f,
        [
            ModuleTrainingMatch(LocalSource("m"), True),
            ConstantMatch(GlobalSource("missing_name"), 1),
        ],
    )
    failure = h.expect_fail(cg, None, Broken())
    assert "RuntimeError: boom" in str(failure)
    failure = h.expect_fail(cg, None, torch.nn.ReLU())
    assert failure.expr == "G['missing_name']" and "KeyError" in str(failure)


def test_empty_guard_set_always_passes(h):
    cg = h.build(add, [])
    h.expect_pass(cg, torch.randn(3), None)


def test_logging_with_env_var(h, monkeypatch, caplog):
    x = torch.randn(4)
    monkeypatch.delenv("TORCHKILN_LOGS", raising=False)
    with caplog.at_level(logging.WARNING, logger="torchkiln.guards"):
        h.build(add, [TensorMatch.from_tensor(X, x)])
    assert not [r for r in caplog.records if r.name == "torchkiln.guards"]
    monkeypatch.setenv("TORCHKILN_LOGS", "recompiles,guards")
    with caplog.at_level(logging.INFO, logger="torchkiln.guards"):
        cg = h.build(add, [TensorMatch.from_tensor(X, x)])
    logged = [r.getMessage() for r in caplog.records if r.name == "torchkiln.guards"]
    assert logged and cg.source in logged[-1]


def test_fast_check_and_explain_agree_on_random_inputs(h):
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(4, 4)
    guards = [TensorMatch.from_tensor(X, base), TensorMatch.from_tensor(Y, base, dynamic_dims={1})]
    cg = h.build(add, guards)
    choices = [
        lambda: torch.randn(4, 4),
        lambda: torch.randn(4, 5),
        lambda: torch.randn(5, 4),
        lambda: torch.randn(4, 4).t(),
        lambda: torch.randn(4, 4, dtype=torch.float64),
        lambda: torch.randn(4, 4, requires_grad=True),
    ]
    for _ in range(40):
        a = choices[int(torch.randint(len(choices), (1,), generator=gen))]()
        b = choices[int(torch.randint(len(choices), (1,), generator=gen))]()
        ok = cg.check(a, b)
        assert ok is (cg.explain_failure(a, b) is None)
        assert ok is (
            a.shape == (4, 4)
            and a.dtype == torch.float32
            and a.stride() == (4, 1)
            and not a.requires_grad
            and b.shape[0] == 4
            and b.dtype == torch.float32
            and b.is_contiguous()
            and not b.requires_grad
        )


def test_guard_set_repr_add_and_slow_path_holds():
    x = torch.randn(3, 3)
    tm = TensorMatch.from_tensor(X, x)
    gs = GuardSet([tm]).add(ConstantMatch(LocalSource("n"), 2), tm)
    assert len(gs) == 2 and type(gs.guards[0]) is ConstantMatch
    assert "TensorMatch(L['x'])" in repr(gs) and "ConstantMatch(L['n'])" in repr(gs)
    assert tm.holds(torch.randn(3, 3)) and not tm.holds(torch.randn(3, 3).t())
    assert tm.describe(torch.randn(3, 3, dtype=torch.float64)) == (
        "L['x'].dtype: expected torch.float32, got torch.float64"
    )
    assert tm.describe(torch.randn(3, 3)) == "TensorMatch(L['x']): holds"


def test_parameters_shadowing_builtins(h):
    import sympy
    from torchkiln_guards import DictKeysMatch, ShapeGuard

    def f(type, len, tuple, max, float=0.5):
        return type

    x = torch.randn(4, 6)
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    guards = [
        TensorMatch.from_tensor(LocalSource("type"), x, dynamic_dims={0}),
        LengthMatch(LocalSource("len"), 2),
        DictKeysMatch(LocalSource("tuple"), ("a",)),
        ConstantMatch(LocalSource("max"), float("nan")),
        ConstantMatch(LocalSource("float"), 0.5),
        ShapeGuard(
            sympy.Eq(sympy.Max(s0, s1), 6),
            {s0: (LocalSource("type"), 0), s1: (LocalSource("type"), 1)},
        ),
    ]
    cg = h.build(f, guards)
    h.expect_pass(cg, torch.randn(3, 6), [1, 2], {"a": 1}, float("nan"))
    h.expect_fail(
        cg, "len(L['len']): expected 2, got 1", torch.randn(3, 6), [1], {"a": 1}, float("nan")
    )
    h.expect_fail(cg, "L['max']: expected nan, got 1.0", torch.randn(3, 6), [1, 2], {"a": 1}, 1.0)
    h.expect_fail(cg, None, torch.randn(7, 6), [1, 2], {"a": 1}, float("nan"))
    assert f(x, 1, 2, 3) is x


def test_a_slice_item_source_is_hashable_and_guarded():
    """``L['t'][1:]`` (a slice of an input tuple handed to a continuation) on Python 3.11 too."""
    from torchkiln_guards import ConstantMatch, ItemSource, LengthMatch, LocalSource, compile_guards

    src = ItemSource(LocalSource("t"), slice(1, None))
    assert hash(src) == hash(ItemSource(LocalSource("t"), slice(1, None)))
    import inspect

    def f(t):
        return t

    guards = compile_guards(
        [LengthMatch(src, 2), ConstantMatch(ItemSource(src, 0), 5)],
        signature=inspect.signature(f),
        f_globals={},
    )
    assert guards.check((1, 5, 7))
    assert not guards.check((1, 6, 7)) and not guards.check((1, 5))


class _Conv:
    def __init__(self, stride):
        self.stride = stride


def _tuple_guards(src, value):
    return [
        TypeMatch(src, tuple),
        LengthMatch(src, len(value)),
        *(ConstantMatch(ItemSource(src, i), v) for i, v in enumerate(value)),
    ]


def conv_call(m):
    return m


def test_constant_tuple_is_checked_once_per_object(h):
    """A tuple guarded only by type, length and constant items: the check remembers the tuple
    object that passed and skips its items while the attribute still holds it; any other object,
    equal or not, is checked in full (``(True, 1)`` equals ``(1, 1)`` but is not accepted)."""
    stride = AttrSource(LocalSource("m"), "stride")
    cg = h.build(conv_call, _tuple_guards(stride, (1, 2)))
    assert cg.source.count("___memo[") == 2  # one group: its test and its update
    first = (1, 2)
    m = _Conv(first)
    h.expect_pass(cg, m)
    h.expect_pass(cg, m)  # the remembered object
    m.stride = tuple([1, 2])  # an equal tuple, another object
    assert m.stride is not first
    h.expect_pass(cg, m)
    for wrong in ((True, 2), (1, 2.0), (1, 3), (1, 2, 3), [1, 2], None):
        m.stride = wrong
        assert cg.check(m) is False, wrong
        assert cg.explain_failure(m) is not None
    m.stride = (1, 2)
    h.expect_pass(cg, m)


def test_tuple_with_other_guards_is_checked_in_full(h):
    """A tuple holding a tensor (or with any guard beyond its constants) is not remembered: a
    tensor item can change in place."""
    arg = LocalSource("m")
    pair = AttrSource(arg, "stride")
    t = torch.zeros(3)
    guards = [
        TypeMatch(pair, tuple),
        LengthMatch(pair, 2),
        ConstantMatch(ItemSource(pair, 0), 1),
        TensorMatch.from_tensor(ItemSource(pair, 1), t),
    ]
    cg = h.build(conv_call, guards)
    assert "___memo[" not in cg.source
    m = _Conv((1, t))
    h.expect_pass(cg, m)
    t.resize_(4)  # the same tuple object, its tensor changed
    assert cg.check(m) is False
