# ruff: noqa: UP006, UP007, UP045, SIM117, C402, PYI041  (the old spellings are what these programs test)
"""More of the Python a forward uses, and the control-flow operators in more settings (see
test_python_features.py and test_higher_order_ops.py). One graph each, against eager.

Known peer difference: TorchDynamo 2.13 breaks on ``super_property_and_kwargs_init`` (a property
read through ``super()``); torchkiln keeps one graph."""

from __future__ import annotations

import collections.abc
import contextlib
import typing
from dataclasses import dataclass

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, xy34
from torch._higher_order_ops.map import map as hmap
from torch._higher_order_ops.while_loop import while_loop

EVENTS: list = []


def _reset():
    EVENTS.clear()


def _observe():
    return list(EVENTS)


def _signed():
    x = randn(3, 4)
    return (x if torch.rand(()) < 0.5 else -x,)


# ----------------------------------------------------------------------------- control flow


def cond_where_inside(x):
    return torch.cond(
        x.mean() > 0, lambda a: torch.where(a > 0, a, a * 0.1), lambda a: a.clamp(-1, 1), (x,)
    )


def cond_any_pred(x):
    return torch.cond(torch.any(x > 1.5), lambda a: a / 2, lambda a: a * 2, (x,))


def cond_list_output(x):
    out = torch.cond(x.sum() > 0, lambda a: [a + 1, a.sum(0)], lambda a: [a - 1, a.mean(0)], (x,))
    return out[0] * out[1]


def cond_under_no_grad(x):
    with torch.no_grad():
        y = torch.cond(x.sum() > 0, lambda a: a.exp(), lambda a: a.log1p().abs(), (x,))
    return y + x


def cond_after_inplace_on_clone(x):
    y = x.clone()
    y.mul_(2).add_(1)
    return torch.cond(y.sum() > 4, lambda a: a.sqrt().nan_to_num(), lambda a: a.square(), (y,))


def cond_3_operands(x, y):
    z = x - y
    return torch.cond(z.sum() > 0, lambda a, b, c: a * b + c, lambda a, b, c: a - b * c, (x, y, z))


def map_3d(xs):
    return hmap(lambda m: m @ m.transpose(0, 1), xs)


def map_body_reduces(xs, w):
    return hmap(lambda x, w: (x * w).sum(-1).softmax(-1), xs, w)


def while_two_carries_and_extra(x, y):
    def cond_fn(i, a, b):
        return i < 3

    def body_fn(i, a, b):
        return i + 1, a + b, b * 0.5

    return torch.ops.higher_order.while_loop(cond_fn, body_fn, (torch.tensor(0), x, y), ())[1:]


def _step(a):
    return a * 0.9 + 0.1


def while_body_calls_helper(x):
    return while_loop(lambda i, a: i < 5, lambda i, a: (i + 1, _step(a)), (torch.tensor(0), x))[1]


# ----------------------------------------------------------------------------- generators


def _until(x, n):
    for i in range(10):
        if i == n:
            return
        yield x + i


def _no_grad_items(x):
    with torch.no_grad():
        yield x * 2
    yield x * 3


def gen_early_return(x):
    return torch.stack(list(_until(x, 3)))


def gen_with_block_inside(x):
    a, b = _no_grad_items(x)
    return a + b


def gen_filtered(x):
    return sum(x * k for k in range(6) if k % 2)


def gen_enumerate(x):
    out = x
    for i, v in enumerate(_until(x, 4)):
        out = out + v * i
    return out


def gen_dict_from_pairs(x):
    d = dict((f"p{i}", x * i) for i in range(3))
    return d["p2"] - d["p1"]


def gen_reversed_list(x):
    return torch.cat(list(reversed(list(_until(x, 3)))))


def gen_min_over_constants(x):
    return x * min(k * k - 4 * k for k in range(6))


# ----------------------------------------------------------------------------- contextlib, super, classes


@contextlib.contextmanager
def _guarded(tag):
    EVENTS.append(tag)
    try:
        yield
    except ValueError:
        EVENTS.append("caught")
        raise
    else:
        EVENTS.append(f"{tag} ok")
    finally:
        EVENTS.append(f"{tag} done")


def cm_try_except_else(x):
    with _guarded("g"):
        y = x.relu()
    return y


@contextlib.contextmanager
def _outer_then_inner():
    with _guarded("outer"):
        with torch.no_grad():
            yield


def cm_nested_in_generator(x):
    with _outer_then_inner():
        y = x * 2
    return y + x


class _Shape:
    sides = 0

    @classmethod
    def describe(cls, t):
        return t * cls.sides

    @staticmethod
    def unit(t):
        return t / t.abs().max()


class _Square(_Shape):
    sides = 4

    @classmethod
    def describe(cls, t):
        return super().describe(t) + cls.unit(t)


class _Named:
    def __init__(self, name, *, scale=1.0):
        self.name = name
        self.scale = scale

    @property
    def tag(self):
        return f"{self.name}:{self.scale}"


class _Weighted(_Named):
    def __init__(self, name, weight, **kwargs):
        super().__init__(name, **kwargs)
        self.weight = weight

    @property
    def tag(self):
        return super().tag + f"/{self.weight}"


def super_in_classmethod(x):
    return _Square.describe(x)


def super_property_and_kwargs_init(x):
    w = _Weighted("w", 3, scale=2.0)
    return x * len(w.tag) * w.scale


@dataclass
class _Spec:
    width: int
    depth: int = 2

    @classmethod
    def square(cls, n):
        return cls(n, n)

    @property
    def area(self):
        return self.width * self.depth


def dc_classmethod_constructor(x):
    s = _Spec.square(3)
    return x * s.area


# ----------------------------------------------------------------------------- typing / abc


def typing_tuple_alias(x):
    pair = typing.Tuple[torch.Tensor, torch.Tensor]
    return x * (2 if typing.get_origin(pair) is tuple else 1)


def abc_isinstance(x, y):
    items = [x, y]
    if isinstance(items, collections.abc.Sequence) and not isinstance(
        items, collections.abc.Mapping
    ):
        return items[0] + items[1]
    return x


def typing_optional_default_chain(
    x, bias: typing.Optional[torch.Tensor] = None, scale: typing.Union[float, int] = 2
):
    out = x * scale
    return out + bias if bias is not None else out


PROGRAMS = [
    Program(cond_where_inside, _signed),
    Program(cond_any_pred, lambda: (randn(3, 4) * 2,)),
    Program(cond_list_output, _signed),
    Program(cond_under_no_grad, lambda: (randn(3, 4).abs().requires_grad_(),)),
    Program(cond_after_inplace_on_clone, _signed),
    Program(cond_3_operands, xy34),
    Program(map_3d, lambda: (randn(4, 3, 5),)),
    Program(map_body_reduces, lambda: (randn(4, 3, 5), randn(5))),
    Program(while_two_carries_and_extra, xy34),
    Program(while_body_calls_helper),
    Program(gen_early_return),
    Program(gen_with_block_inside, lambda: (randn(3, 4).requires_grad_(),)),
    Program(gen_filtered),
    Program(gen_enumerate),
    Program(gen_dict_from_pairs),
    Program(gen_reversed_list),
    Program(gen_min_over_constants),
    Program(cm_try_except_else, setup=_reset, observe=_observe),
    Program(
        cm_nested_in_generator,
        lambda: (randn(3, 4).requires_grad_(),),
        setup=_reset,
        observe=_observe,
    ),
    Program(super_in_classmethod),
    Program(super_property_and_kwargs_init),
    Program(dc_classmethod_constructor),
    Program(typing_tuple_alias),
    Program(abc_isinstance, xy34),
    Program(typing_optional_default_chain, name="typing_optional_default"),
    Program(typing_optional_default_chain, xy34, name="typing_optional_given"),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
