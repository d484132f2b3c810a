"""Calls: positional, keyword, *args, **kwargs, defaults, keyword-only, inlined user functions."""

from __future__ import annotations

import functools

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, x34, xy34


def _affine(x, w=2.0, b=0.5):
    return x * w + b


def _kwonly(x, *, scale, shift=1.0):
    return x * scale + shift


def _varargs(*xs):
    out = xs[0]
    for t in xs[1:]:
        out = out + t
    return out


def _varkw(x, **opts):
    return x * opts.get("scale", 1.0) + opts.get("shift", 0.0)


def _both(x, *args, **kwargs):
    return x + sum(args) + sum(kwargs.values())


def call_positional(x):
    return _affine(x, 3.0, 1.0)


def call_defaults(x):
    return _affine(x)


def call_keyword(x):
    return _affine(x, b=-1.0)


def call_keyword_all(x):
    return _affine(b=2.0, w=0.5, x=x)


def call_kwonly(x):
    return _kwonly(x, scale=3.0)


def call_kwonly_override(x):
    return _kwonly(x, shift=-2.0, scale=0.5)


def call_star_args(x, y):
    return _varargs(x, y, x)


def call_star_unpack_list(x, y):
    parts = [x, y, y]
    return _varargs(*parts)


def call_star_unpack_tuple_mixed(x, y):
    rest = (y,)
    return _varargs(x, *rest, x * 2)


def call_star_kwargs(x):
    return _varkw(x, scale=2.0, shift=3.0)


def call_double_star_unpack(x):
    opts = {"scale": 4.0}
    return _varkw(x, **opts)


def call_double_star_merge(x):
    a = {"scale": 2.0}
    b = {"shift": -1.0}
    return _varkw(x, **a, **b)


def call_args_and_kwargs(x):
    return _both(x, 1.0, 2.0, k=3.0)


def call_forward_star(x, y):
    args = (x, y)
    kw = {}
    return torch.add(*args, **kw)


def call_torch_kwargs(x, y):
    return torch.add(x, y, alpha=2.0)


def call_nested_inline(x):
    def inner(a):
        return _affine(a, w=a.shape[0])

    return inner(x) + inner(x * 2)


def _recursive_depth(x, n):
    if n == 0:
        return x
    return _recursive_depth(x * 2, n - 1)


def call_recursion_known_depth(x):
    return _recursive_depth(x, 3)


def call_lambda(x):
    f = lambda t: t * 2 + 1  # noqa: E731 - the lambda is what is captured
    return f(x)


def call_lambda_default(x):
    f = lambda t, k=3: t * k  # noqa: E731 - the lambda is what is captured
    return f(x)


def call_partial_positional(x):
    p = functools.partial(_affine, w=5.0)
    return p(x)


def call_partial_kw(x):
    p = functools.partial(_kwonly, scale=2.0)
    return p(x, shift=0.0)


def call_partial_of_torch(x):
    p = functools.partial(torch.clamp, min=-0.5, max=0.5)
    return p(x)


def call_partial_nested(x):
    p = functools.partial(functools.partial(_affine, w=2.0), b=3.0)
    return p(x)


def call_returns_tuple(x):
    def two(a):
        return a + 1, a - 1

    p, q = two(x)
    return p * q


def call_returns_dict(x):
    def mk(a):
        return {"sum": a.sum(), "max": a.max()}

    d = mk(x)
    return d["sum"] + d["max"]


def call_returns_none_then_use(x):
    def noop(a):
        return None

    r = noop(x)
    return x + 1 if r is None else x * 0


def call_function_as_argument(x):
    def apply(fn, a):
        return fn(a)

    return apply(torch.sin, x) + apply(lambda t: t * 3, x)


def call_higher_order_returned(x):
    def make(k):
        def f(a):
            return a * k

        return f

    return make(2.0)(x) + make(3.0)(x)


def call_staticmethod_global(x):
    return Ops.double(x)


def call_classmethod_global(x):
    return Ops.triple(x)


class Ops:
    factor = 3.0

    @staticmethod
    def double(x):
        return x * 2

    @classmethod
    def triple(cls, x):
        return x * cls.factor


def call_kwargs_input(x, *, y):
    return x - y


def call_default_input(x, y=None):
    if y is None:
        return x * 2
    return x + y


def call_generic_varargs_entry(*args):
    return args[0] * args[1]


PROGRAMS = [
    Program(call_positional),
    Program(call_defaults),
    Program(call_keyword),
    Program(call_keyword_all),
    Program(call_kwonly),
    Program(call_kwonly_override),
    Program(call_star_args, xy34),
    Program(call_star_unpack_list, xy34),
    Program(call_star_unpack_tuple_mixed, xy34),
    Program(call_star_kwargs),
    Program(call_double_star_unpack),
    Program(call_double_star_merge),
    Program(call_args_and_kwargs),
    Program(call_forward_star, xy34),
    Program(call_torch_kwargs, xy34),
    Program(call_nested_inline),
    Program(call_recursion_known_depth),
    Program(call_lambda),
    Program(call_lambda_default),
    Program(call_partial_positional),
    Program(call_partial_kw),
    Program(call_partial_of_torch),
    Program(call_partial_nested),
    Program(call_returns_tuple),
    Program(call_returns_dict),
    Program(call_returns_none_then_use),
    Program(call_function_as_argument),
    Program(call_higher_order_returned),
    Program(call_staticmethod_global),
    Program(call_classmethod_global),
    Program(call_kwargs_input, x34, kwargs=lambda: {"y": randn(3, 4)}),
    Program(call_default_input, x34, name="call_default_input_omitted"),
    Program(call_default_input, xy34, name="call_default_input_given"),
    Program(call_generic_varargs_entry, xy34),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
