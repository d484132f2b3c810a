# ruff: noqa: UP007, UP045, SIM117, RUF007  (the old spellings are what these programs test)
"""The Python a model's forward uses: generators consumed in the frame, ``functools.wraps``
wrappers, ``contextlib.contextmanager`` blocks, ``super()`` chains, properties, class and static
methods, dataclasses and ``typing`` evaluated at run time. Each captured in one graph (as
TorchDynamo does), checked against eager for results, side effects and graph count.

Known peer differences: TorchDynamo 2.13 breaks the graph (fullgraph raises) on
``functools.cached_property`` (``prop_cached``), ``dataclasses.fields`` of a class
(``dc_fields_names``), subscripting a ``Generic`` class (``typing_generic_class``) and
``typing.Union`` / ``get_args`` / ``get_type_hints`` at run time; torchkiln keeps one graph."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import typing
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, Optional, TypeVar, Union

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, xy34
from torch import nn

LOG: list = []
STATE = {"calls": 0}


def _reset():
    LOG.clear()
    STATE["calls"] = 0


def _observe():
    return (list(LOG), dict(STATE))


# ----------------------------------------------------------------------------- generators


def _squares(x, n):
    for i in range(n):
        yield x * i


def _pairs(xs):
    for a, b in zip(xs, xs[1:]):
        yield a + b


def _delegating(x):
    yield x
    yield from _squares(x, 3)
    yield x.sum()


def gen_sum(x):
    return sum(_squares(x, 4))


def gen_list(x):
    return torch.stack(list(_squares(x, 3)))


def gen_next(x):
    g = _squares(x + 1, 5)
    first = next(g)
    second = next(g)
    return first * second


def gen_for_loop_break(x):
    out = x
    for i, v in enumerate(_squares(x, 10)):
        if i == 3:
            break
        out = out + v
    return out


def gen_yield_from(x):
    return [v * 2 for v in _delegating(x)]


def gen_zip_two(x, y):
    return sum(a * b for a, b in zip(_squares(x, 3), _squares(y, 3)))


def gen_pairs(x):
    return torch.cat(list(_pairs([x, x * 2, x * 3])))


def gen_expression_any(x):
    return x * 2 if any(d > 3 for d in x.shape) else x


def gen_in_tuple_unpack(x):
    a, b, c = _squares(x, 3)
    return a + b * c


def gen_local_generator(x):
    def counter(t):
        total = t
        for k in range(3):
            total = total + k
            yield total

    return torch.stack(list(counter(x)))


def gen_dict_comprehension(x):
    d = {f"k{i}": v for i, v in enumerate(_squares(x, 3))}
    return d["k2"] - d["k1"]


def gen_itertools_chain(x, y):
    return sum(itertools.chain(_squares(x, 2), _squares(y, 2)))


def gen_sorted_keys(x):
    parts = {"b": x * 2, "a": x + 1}
    return torch.cat([parts[k] for k in sorted(parts)])


# ----------------------------------------------------------------------------- functools.wraps


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2

    return wrapper


def scaled(factor):
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(x, *rest):
            return fn(x * factor, *rest)

        return wrapper

    return deco


@logged
def _helper_logged(x):
    return x.sin()


@scaled(3.0)
@logged
def _helper_stacked(x, y):
    return x + y


def counting(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        STATE["calls"] += 1
        return fn(*args)

    return wrapper


@counting
def _helper_counted(x):
    return x.cos()


def wraps_simple(x):
    return _helper_logged(x) + 1


def wraps_stacked(x, y):
    return _helper_stacked(x, y)


def wraps_counts_calls(x):
    return _helper_counted(x) + _helper_counted(x * 2)


def wraps_reads_metadata(x):
    name = _helper_logged.__name__
    return x * len(name) + (1 if _helper_logged.__wrapped__ is not None else 0)


def wraps_local_decorator(x):
    @logged
    def inner(t):
        return t * 3

    return inner(x)


def wraps_kwargs(x):
    @logged
    def inner(t, *, shift=0.0):
        return t + shift

    return inner(x, shift=2.5)


class _WrappedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @logged
    def forward(self, x):
        return self.lin(x)


def wraps_update_wrapper(x):
    def inner(t):
        """Doc of inner."""
        return t - 1

    def outer(t):
        return inner(t) * 2

    functools.update_wrapper(outer, inner)
    return outer(x) + len(outer.__name__) + len(outer.__doc__)


def wraps_metadata_of_local(x):
    @logged
    def inner(t):
        """Doc."""
        return t * 3

    return inner(x) + len(inner.__name__) + len(inner.__doc__) + (inner.__wrapped__(x) * 0).sum()


# ----------------------------------------------------------------------------- contextlib


@contextlib.contextmanager
def _logging_block(tag):
    LOG.append(f"enter {tag}")
    try:
        yield tag
    finally:
        LOG.append(f"exit {tag}")


@contextlib.contextmanager
def _scale_ctx(t):
    yield t * 2


@contextlib.contextmanager
def _no_grad_ctx():
    with torch.no_grad():
        yield


def cm_basic(x):
    with _logging_block("a"):
        y = x * 2
    return y + 1


def cm_value(x):
    with _scale_ctx(x) as doubled:
        out = doubled + x
    return out


def cm_nested(x):
    with _logging_block("outer") as o:
        with _logging_block("inner") as i:
            y = x * len(o) + len(i)
    return y


def cm_nullcontext(x):
    with contextlib.nullcontext(x * 2) as y:
        return y + 1


def cm_no_grad_inside(x):
    with _no_grad_ctx():
        y = x * 3
    return y, x * 2


def cm_suppress(x):
    with contextlib.suppress(KeyError):
        y = x + {"a": 1}["a"]
    return y


def cm_return_inside(x):
    with _logging_block("r"):
        return x.exp()


def cm_loop_inside(x):
    out = x
    for k in range(3):
        with _logging_block(f"it{k}"):
            out = out * 0.5 + k
    return out


# ----------------------------------------------------------------------------- super() chains


class _Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return x * self.scale

    def extra(self, x):
        return x + 1


class _Middle(_Base):
    def forward(self, x):
        return super().forward(x) + 1


class _Leaf(_Middle):
    def forward(self, x):
        return super().forward(x).relu() + super().extra(x)


class _MixinA:
    def describe(self, x):
        return x + 10


class _MixinB(_MixinA):
    def describe(self, x):
        return super().describe(x) * 2


class _Diamond1(_MixinA):
    def describe(self, x):
        return super().describe(x) - 1


class _Diamond(_MixinB, _Diamond1):
    def describe(self, x):
        return super().describe(x) / 3


class _WithLinear(nn.Linear):
    def forward(self, x):
        return super().forward(x).tanh()


class _ExplicitSuper(_Middle):
    def forward(self, x):
        return super(_Middle, self).forward(x) - 3


def super_mixin_chain(x):
    return _MixinB().describe(x)


def super_diamond(x):
    return _Diamond().describe(x)


# ----------------------------------------------------------------------------- properties, class/static methods


class _Box:
    factor = 3

    def __init__(self, t):
        self._t = t
        self._scale = 1.5

    @property
    def value(self):
        return self._t * self._scale

    @property
    def scale(self):
        return self._scale

    @scale.setter
    def scale(self, v):
        self._scale = v

    @functools.cached_property
    def doubled(self):
        return self._t * 2

    @classmethod
    def make(cls, t):
        return cls(t * cls.factor)

    @staticmethod
    def combine(a, b):
        return a * b + 1

    @classmethod
    def chain(cls, t):
        return cls.combine(t, t) + cls.factor


class _SubBox(_Box):
    factor = 5


def prop_read(x):
    return _Box(x).value


def prop_setter(x):
    b = _Box(x)
    b.scale = 4.0
    return b.value + b.scale


def prop_cached(x):
    b = _Box(x)
    return b.doubled + b.doubled


def cls_factory(x):
    return _Box.make(x).value


def cls_factory_subclass(x):
    return _SubBox.make(x).value


def static_call(x, y):
    return _Box.combine(x, y) + _Box(x).combine(y, y)


def cls_calls_static(x):
    return _SubBox.chain(x)


class _PropModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    @property
    def weight_t(self):
        return self.lin.weight.t()

    @staticmethod
    def act(x):
        return x.relu()

    @classmethod
    def width(cls):
        return 4

    def forward(self, x):
        return self.act(x @ self.weight_t) * self.width()


# ----------------------------------------------------------------------------- dataclasses


@dataclass
class _Cfg:
    hidden: int = 4
    scale: float = 0.5
    names: list = field(default_factory=lambda: ["a", "b"])

    def apply(self, x):
        return x * self.scale + len(self.names)


@dataclass
class _Derived:
    base: float
    total: float = dataclasses.field(init=False)

    def __post_init__(self):
        self.total = self.base * 2


@dataclass(frozen=True)
class _Frozen:
    k: int = 3


def dc_method(x):
    return _Cfg(scale=2.0).apply(x)


def dc_post_init(x):
    d = _Derived(1.5)
    return x * d.total


def dc_asdict_keys(x):
    cfg = _Cfg()
    return x * len(dataclasses.asdict(cfg))


def dc_fields_names(x):
    return x + len([f.name for f in dataclasses.fields(_Cfg)])


def dc_replace_frozen(x):
    f = dataclasses.replace(_Frozen(), k=5)
    return x * f.k


def dc_equality(x):
    return x * (1 if _Frozen(2) == _Frozen(2) else 0)


# ----------------------------------------------------------------------------- typing at run time

T = TypeVar("T")


class _Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class _Holder(Generic[T]):
    def __init__(self, item: T):
        self.item = item

    def get(self) -> T:
        return self.item


def typing_optional_arg(x, mask: Optional[torch.Tensor] = None):
    if mask is not None:
        x = x * mask
    return x + 1


def typing_local_annotations(x):
    y: torch.Tensor = x * 2
    n: int = 3
    return y + n


def typing_cast(x):
    y = typing.cast(torch.Tensor, x * 2)
    return y.sum(0)


def typing_isinstance_checks(x):
    out = x
    if isinstance(out, torch.Tensor):
        out = out + 1
    if isinstance(3, (int, float)):
        out = out * 2
    return out


def typing_namedtuple(x, y):
    p = _Pair(x, y)
    return p.first * p.second + p[0]


def typing_generic_class(x):
    h = _Holder[torch.Tensor](x * 3)
    return h.get() + 1


def typing_union_built(x):
    kind = Union[int, None]
    return x * (2 if typing.get_origin(kind) is Union else 1)


def typing_get_args(x):
    return x * len(typing.get_args(Optional[int]))


def typing_type_checking(x):
    if typing.TYPE_CHECKING:
        return x * 100
    return x - 1


def typing_get_type_hints(x):
    hints = typing.get_type_hints(_Cfg)
    return x * len(hints)


PROGRAMS = [
    # generators
    Program(gen_sum),
    Program(gen_list),
    Program(gen_next),
    Program(gen_for_loop_break),
    Program(gen_yield_from),
    Program(gen_zip_two, xy34),
    Program(gen_pairs),
    Program(gen_expression_any),
    Program(gen_in_tuple_unpack),
    Program(gen_local_generator),
    Program(gen_dict_comprehension),
    Program(gen_itertools_chain, xy34),
    Program(gen_sorted_keys),
    # functools.wraps
    Program(wraps_simple),
    Program(wraps_stacked, xy34),
    Program(wraps_counts_calls, setup=_reset, observe=_observe),
    Program(wraps_reads_metadata),
    Program(wraps_local_decorator),
    Program(wraps_kwargs),
    Program(_WrappedForward(), lambda: (randn(3, 4),)),
    Program(wraps_update_wrapper),
    Program(wraps_metadata_of_local),
    # contextlib
    Program(cm_basic, setup=_reset, observe=_observe),
    Program(cm_value),
    Program(cm_nested, setup=_reset, observe=_observe),
    Program(cm_nullcontext),
    Program(cm_no_grad_inside, lambda: (randn(3, 4).requires_grad_(),)),
    Program(cm_suppress),
    Program(cm_return_inside, setup=_reset, observe=_observe),
    Program(cm_loop_inside, setup=_reset, observe=_observe),
    # super()
    Program(_Middle(), name="super_two_levels"),
    Program(_Leaf(), name="super_three_levels"),
    Program(_WithLinear(4, 4), name="super_torch_module"),
    Program(_ExplicitSuper(), name="super_explicit_args"),
    Program(super_mixin_chain),
    Program(super_diamond),
    # properties, class and static methods
    Program(prop_read),
    Program(prop_setter),
    Program(prop_cached),
    Program(cls_factory),
    Program(cls_factory_subclass),
    Program(static_call, xy34),
    Program(cls_calls_static),
    Program(_PropModule()),
    # dataclasses
    Program(dc_method),
    Program(dc_post_init),
    Program(dc_asdict_keys),
    Program(dc_fields_names),
    Program(dc_replace_frozen),
    Program(dc_equality),
    # typing
    Program(typing_optional_arg, name="typing_optional_none"),
    Program(typing_optional_arg, xy34, name="typing_optional_tensor"),
    Program(typing_local_annotations),
    Program(typing_cast),
    Program(typing_isinstance_checks),
    Program(typing_namedtuple, xy34),
    Program(typing_generic_class),
    Program(typing_union_built),
    Program(typing_get_args),
    Program(typing_type_checking),
    Program(typing_get_type_hints),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)


@contextlib.contextmanager
def _printing_block(tag):
    print("entering", tag)  # a break inside the generator itself
    yield tag
    LOG.append(f"exit {tag}")


def _break_in_body(x):
    with _logging_block("b"):
        y = x * 2
        print("inside")  # a break inside the block
        z = y + 1
    return z


def _break_in_generator(x):
    y = x + 1
    with _printing_block("p") as t:
        z = y * len(t)
    return z


@pytest.mark.parametrize("fn", [_break_in_body, _break_in_generator])
def test_break_around_a_contextmanager_runs_it_in_python(fn, capsys):
    """A break while a traced contextmanager block is open cannot hand the block to CPython (its
    generator exists only symbolically): capture retries with the contextmanager run in Python,
    as before contextmanagers were traced: graphs around it, same output and side effects."""
    from _conformance_harness import RecordingBackend
    from torchkiln_dynamo_capture import capture

    backend = RecordingBackend()
    compiled = capture(fn, backend)
    for _ in range(2):
        x = randn(3)
        _reset()
        got = compiled(x)
        got_log, got_out = list(LOG), capsys.readouterr().out
        _reset()
        want = fn(x)
        assert LOG == got_log and capsys.readouterr().out == got_out
        torch.testing.assert_close(got, want)
    assert backend.calls == 2
    assert all("GeneratorContextVariable" not in b.reason for b in compiled.graph_breaks)
