"""Breaks inside called user functions (2-3 levels), methods, closures, keyword and *args calls.

Calling a user function whose body breaks is itself a break in the caller; the callee is captured
as its own frame. A callee called again with the same guards (same-shaped tensors, equal Python
values) hits its cache entries: that second call compiles nothing.
"""

from __future__ import annotations

import functools

import torch
from _breaks_harness import program, register


def _h_print(t):
    y = t * 2
    print("h")
    return y + 1


def _mid(t):
    u = t - 1
    v = _h_print(u)
    return v * 3


def _outer3(t):
    return _mid(t).relu()


def _pure(t):
    return t * 2 + 1


def _say(msg):
    print(msg)


def _break_at_start(t):
    print("g starts")
    return t * 2


def _break_at_end(t):
    u = t * 2
    print("g ends")
    return u


@program(graphs=4)
def callee_breaks_in_middle(x):
    a = x.sin()
    b = _h_print(a)
    return b.cos()


@program(graphs=6)
def two_levels_of_breaking_callees(x):
    return _mid(x + 1).sum()


@program(graphs=5)
def three_levels_of_breaking_callees(x):
    return _outer3(x)


@program(graphs=2)
def pure_callees_are_inlined(x):
    a = _pure(x)
    print("between")
    return _pure(a)


@program(graphs=2)
def callee_only_prints(x):
    a = x + 1
    _say("hi")
    return a * 2


@program(graphs=3)
def callee_breaks_at_its_start(x):
    a = x + 1
    b = _break_at_start(a)
    return b + 1


@program(graphs=3)
def callee_breaks_at_its_end(x):
    a = x + 1
    b = _break_at_end(a)
    return b + 1


@program(graphs=4)
def callee_in_the_middle_of_an_expression(x):
    return x.sin() + _h_print(x) * 2


@program(graphs=3)
def same_callee_twice_hits_its_cache(x):
    a = _h_print(x)
    b = _h_print(a)
    return a + b


@program(graphs=2)
def same_callee_in_a_loop_hits_its_cache(x):
    for _ in range(3):
        x = _h_print(x)
    return x


def _scale(t, *, factor=2.0, verbose=False):
    if verbose:
        print("scale", factor)
    return t * factor


@program(graphs=3)
def keyword_arguments_to_breaking_callee(x):
    return _scale(x + 1, factor=3.0, verbose=True) - 1


@program(graphs=1)
def keyword_arguments_callee_does_not_break(x):
    return _scale(x + 1, factor=3.0, verbose=False) - 1


def _sum_all(*ts):
    print("summing", len(ts))
    return sum(ts)


@program(graphs=2)
def star_args_to_breaking_callee(x):
    return _sum_all(x, x * 2, x * 3)


@program(graphs=2)
def star_unpacked_list_to_breaking_callee(x):
    parts = [x.cos(), x.sin()]
    return _sum_all(*parts)


def _with_kwargs(t, **kw):
    print(sorted(kw))
    return t * kw["a"] + kw["b"]


@program(graphs=2)
def double_star_kwargs_to_breaking_callee(x):
    x = x.abs()
    return _with_kwargs(x, a=2.0, b=1.0)


@program(graphs=2, kwargs=lambda: {"factor": 4.0, "verbose": True})
def top_level_keyword_arguments(x, *, factor=1.0, verbose=False):
    y = x * factor
    if verbose:
        print("factor", factor)
    return y + factor


def _split(t):
    print("split")
    return t[0], t[1:]


@program(graphs=3)
def callee_returns_tuple_after_break(x):
    a, b = _split(x * 2)
    return a.sum() + b.sum()


class _Acc:
    def __init__(self):
        self.total = 0

    def add(self, t):
        self.total += 1
        print("add", self.total)
        return t + self.total


@program(graphs=3)
def method_of_object_built_inside(x):
    acc = _Acc()
    a = acc.add(x)
    b = acc.add(a * 2)
    return b, acc.total


def _fact(t, n):
    if n == 0:
        print("base")
        return t
    return _fact(t * n, n - 1)


# _fact(x, 3) [t*3], _fact at n=2 recompiled with n symbolic [t*n] (reused at n=1), the base
# case has no tensor op: 2 graphs (TorchDynamo: 3, it compiles n=1 on its own)
@program(graphs=2)
def recursion_with_break_at_the_bottom(x):
    return _fact(x, 3)


def _make_closure(scale):
    def inner(x):
        y = x.abs()
        print("inner", scale)
        return y * scale

    return inner


register(lambda: _make_closure(3.0), graphs=2, name="closure_breaks", kind="nested")


def _make_counter():
    count = 0

    def f(x):
        nonlocal count
        count += 1
        y = x * count
        print("count", count)
        count += 1
        return y + count

    def reset():
        nonlocal count
        count = 0

    def read():
        return count

    return f, reset, read


_COUNTER, _RESET, _READ = _make_counter()
register(
    lambda: _COUNTER,
    graphs=2,
    name="closure_cell_mutated_across_break",
    kind="nested",
    setup=_RESET,
    observe=_READ,
)


def _apply(fn, t):
    out = fn(t)
    print("applied")
    return out


def _double(t):
    return t * 2


@program(graphs=2)
def higher_order_breaking_callee(x):
    y = _apply(torch.tanh, x)
    z = _apply(_double, y)
    return z


@program(graphs=3)
def lambda_that_breaks_called_in_expression(x):
    noisy = lambda t: (print("noisy"), t * 2)[1]  # noqa: E731 - the lambda is what is captured
    return x.exp() - noisy(x)


@program(graphs=3)
def functools_partial_of_breaking_function(x):
    scaled = functools.partial(_scale, factor=2.0, verbose=True)
    y = x.abs()
    return scaled(y) + 1


class _Noisy:
    def __init__(self, t):
        print("init")
        self.t = t * 2

    @property
    def value(self):
        print("property read")
        return self.t + 1

    @staticmethod
    def static_double(t):
        print("static")
        return t * 2

    @classmethod
    def make(cls, t):
        print("classmethod")
        return cls(t.neg())


@program(graphs=4)
def init_and_property_that_print(x):
    y = x.cos()
    obj = _Noisy(y)
    return obj.value * 3


@program(graphs=3)
def staticmethod_that_prints(x):
    y = x.sin()
    return _Noisy.static_double(y) - 1


@program(graphs=3)
def classmethod_that_prints(x):
    obj = _Noisy.make(x)
    return obj.t.sum()


class _Holder:
    """Read through properties whose getters break (captured as their own frames, as callees)."""

    def __init__(self, t):
        self.t = t

    @property
    def value(self):
        print("value read")
        return self.t + 1

    @property
    def outer(self):
        return self.value * 2  # the inner getter breaks: this getter's frame is split around it

    @property
    def risky(self):
        print("risky read")
        return self.t / 0 if self.t.dim() > 5 else self.t.neg()


def _holder34() -> tuple:
    return (_Holder(torch.randn(3, 4)),)


@program(graphs=3, inputs=_holder34)
def property_of_an_argument_that_prints(h):
    y = h.t.sin()
    return h.value * y


# y = cos [1]; h.outer: the outer getter's frame breaks at self.value, whose getter prints and
# adds [2]; the outer getter's continuation doubles [3]; the caller's continuation triples [4]
@program(graphs=4)
def property_whose_getter_reads_a_breaking_property(x):
    y = x.cos()
    h = _Holder(y)
    return h.outer * 3


@program(graphs=3, inputs=_holder34)
def property_that_prints_inside_try(h):
    y = h.t.exp()
    try:
        v = h.risky
    except ZeroDivisionError:
        v = y
    return v - y


@program(graphs=2, inputs=_holder34)
def property_that_prints_read_twice(h):
    a = h.value
    b = h.value  # the same getter on the same object again: its entry is a cache hit
    return a * b


class _Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, t):
        print("scaler", self.k)
        return t * self.k


_SCALER = _Scaler(1.5)


@program(graphs=3)
def callable_object_that_prints(x):
    y = x.exp()
    return _SCALER(y) - 1


def _everything(a, b=2.0, *rest, scale, shift=0.0, **extra):
    print("everything", len(rest), sorted(extra))
    return (a * b + sum(rest)) * scale + shift + extra.get("bias", 0.0)


@program(graphs=3)
def callee_with_every_kind_of_parameter(x):
    y = x.abs()
    out = _everything(y, 3.0, y, y * 2, scale=0.5, bias=1.0, note="n")
    return out.sum(0)
