"""Loads and stores: fast locals, closure cells, globals, attributes, subscripts."""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, xy34

SCALE = 2.5
OFFSET_T = torch.arange(4.0)
NAMES = {"a": 1.5, "b": -0.5}
PAIR = (3.0, 4.0)


class Inner:
    beta = 1.25


class Holder:
    def __init__(self) -> None:
        self.alpha = 0.75
        self.inner = Inner()
        self.items = [1.0, 2.0, 3.0]


HOLDER = Holder()


def fast_local_roundtrip(x):
    y = x + 1
    z = y * 2
    return z - y


def fast_local_reassign(x):
    y = x
    y = y.sin()
    y = y + x
    return y


def fast_local_swap(x, y):
    x, y = y, x
    return x - y


def fast_local_del(x):
    tmp = x * 3
    out = tmp + 1
    del tmp
    return out


def global_constant(x):
    return x * SCALE


def global_tensor(x):
    return x + OFFSET_T


def global_dict_item(x):
    return x * NAMES["a"] + NAMES["b"]


def global_tuple_unpack(x):
    a, b = PAIR
    return x * a + b


def global_object_attr(x):
    return x * HOLDER.alpha


def global_nested_attr(x):
    return x + HOLDER.inner.beta


def global_object_list_item(x):
    return x * HOLDER.items[1] + HOLDER.items[-1]


def global_builtin_module_attr(x):
    return x * torch.pi


def _make_closure_const():
    k = 3.0

    def closure_const(x):
        return x * k

    return closure_const


def _make_closure_tensor():
    bias = torch.ones(4)

    def closure_tensor(x):
        return x + bias

    return closure_tensor


def _make_closure_nested():
    a = 2.0

    def middle():
        b = 3.0

        def closure_two_levels(x):
            return x * a + b

        return closure_two_levels

    return middle()


def closure_cell_local_inner(x):
    scale = 4.0

    def inner(y):
        return y * scale

    return inner(x) + 1


def closure_cell_written_inner(x):
    acc = x

    def add(y):
        nonlocal acc
        acc = acc + y

    add(x)
    add(1.0)
    return acc


def closure_cell_read_after_def(x):
    def inner():
        return z * 2

    z = x + 1
    return inner()


def attr_of_tensor(x):
    return x.T + 0


def subscript_int(x):
    return x[0] * 2


def subscript_negative(x):
    return x[-1] + x[0]


def subscript_slice(x):
    return x[1:3, ::2]


def subscript_ellipsis(x):
    return x[..., 1]


def subscript_none(x):
    return x[None, :, None].sum(0)


def subscript_tuple_mixed(x):
    return x[1:, 2] + x[0, :3].sum()


def subscript_tensor_index(x, idx):
    return x[idx]


def subscript_bool_mask_where(x):
    return torch.where(x > 0, x, torch.zeros_like(x))


def store_subscript_tensor(x):
    y = x.clone()
    y[0] = 0.0
    return y


def store_subscript_slice(x):
    y = x.clone()
    y[:, 1:3] = y[:, 1:3] * 10
    return y


def store_subscript_list(x):
    parts = [x, x]
    parts[1] = x * 2
    return parts[0] + parts[1]


def store_subscript_dict(x):
    d = {}
    d["k"] = x + 1
    d["j"] = d["k"] * 2
    return d["j"]


def store_attr_local_object(x):
    h = Holder()
    h.alpha = 3.0
    return x * h.alpha


def list_index_const(x):
    scales = [1.0, 2.0, 3.0]
    return x * scales[2]


def unpack_star(x):
    a, *rest = x.unbind(0)
    return a + rest[-1]


def unpack_nested(x):
    (a, b), c = (x, x * 2), x * 3
    return a + b + c


PROGRAMS = [
    Program(fast_local_roundtrip),
    Program(fast_local_reassign),
    Program(fast_local_swap, xy34),
    Program(fast_local_del),
    Program(global_constant),
    Program(global_tensor),
    Program(global_dict_item),
    Program(global_tuple_unpack),
    Program(global_object_attr),
    Program(global_nested_attr),
    Program(global_object_list_item),
    Program(global_builtin_module_attr),
    Program(_make_closure_const()),
    Program(_make_closure_tensor()),
    Program(_make_closure_nested()),
    Program(closure_cell_local_inner),
    Program(closure_cell_written_inner),
    Program(closure_cell_read_after_def),
    Program(attr_of_tensor),
    Program(subscript_int),
    Program(subscript_negative),
    Program(subscript_slice),
    Program(subscript_ellipsis),
    Program(subscript_none),
    Program(subscript_tuple_mixed),
    Program(subscript_tensor_index, lambda: (randn(5, 4), torch.randint(0, 5, (3,)))),
    Program(subscript_bool_mask_where),
    Program(store_subscript_tensor),
    Program(store_subscript_slice),
    Program(store_subscript_list),
    Program(store_subscript_dict),
    Program(store_attr_local_object),
    Program(list_index_const),
    Program(unpack_star),
    Program(unpack_nested),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
