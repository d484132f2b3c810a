# ruff: noqa: B009, C408, C409, C417, PLR0124
# (the programs spell these constructs on purpose: each is bytecode capture must handle)
"""Builtins on known values: len, isinstance, getattr, range, min/max/abs/sum, any/all, constructors."""

from __future__ import annotations

import math

import pytest
import torch
from _conformance_harness import Program, ids, run_program, xy34


def b_len_shape(x):
    return x * len(x.shape) + len(x)


def b_isinstance_tuple_types(x):
    v = 3
    return x + 1 if isinstance(v, (int, float)) and not isinstance(v, bool) else x


def b_issubclass(x):
    return x * 2 if issubclass(bool, int) else x


def b_getattr_torch(x):
    fn = getattr(torch, "tanh")
    return fn(x)


def b_getattr_tensor_method(x):
    return getattr(x, "sum")(dim=0)


def b_hasattr_tensor(x):
    return x + 1 if hasattr(x, "shape") else x


def b_range_list(x):
    r = list(range(2, 8, 2))
    return x * r[-1] + len(r)


def b_range_len_index(x):
    r = range(10)
    return x * len(r) + r[3]


def b_enumerate_list(x):
    pairs = list(enumerate(["a", "b"]))
    return x * pairs[1][0]


def b_zip_list(x):
    pairs = list(zip([1, 2], [3, 4]))
    return x * pairs[1][1]


def b_min_max_ints(x):
    return x * max(2, 5, 3) + min(4, 1)


def b_min_max_list(x):
    dims = [3, 9, 4]
    return x * max(dims) - min(dims)


def b_min_max_shapes(x):
    return x * max(x.shape) / min(x.shape)


def b_min_with_key_const(x):
    names = ["long", "s", "mid"]
    return x * len(min(names, key=len))


def b_abs_round(x):
    return x * abs(-3) + round(2.6) + round(1.234, 1)


def b_sum_ints(x):
    return x * sum([1, 2, 3])


def b_sum_start(x):
    return sum([x, x], x * 10)


def b_sum_tensors(x, y):
    return sum([x, y, x * y])


def b_any_all(x):
    flags = [True, False]
    return x + any(flags) * 2 + all(flags) * 3


def b_int_float_bool(x):
    return x * int("3") + float(2) + bool(1) + int(3.7)


def b_int_of_shape(x):
    return x.view(int(x.shape[0]), -1) * float(x.shape[1])


def b_tuple_list_ctor(x):
    shape = tuple([x.shape[1], x.shape[0]])
    return x.reshape(list(shape))


def b_dict_ctor_kwargs(x):
    d = dict(a=1, b=2)
    return x * d["b"]


def b_list_of_tensor(x):
    rows = list(x)
    return rows[0] + rows[-1]


def b_tuple_of_generator(x):
    t = tuple(i * 2 for i in range(3))
    return x * t[2]


def b_sorted(x):
    vals = sorted([3, 1, 2], reverse=True)
    return x * vals[0] + vals[-1]


def b_reversed_tuple(x):
    t = tuple(reversed((1, 2, 3)))
    return x * t[0]


def b_divmod_pow(x):
    q, r = divmod(17, 5)
    return x * q + r + pow(2, 3)


def b_str_repr(x):
    return x * len(str(12345)) + len(repr("ab"))


def b_type_check(x):
    return x + 1 if type(x) is torch.Tensor else x


def b_id_identity(x):
    a = [1]
    return x * 2 if id(a) == id(a) else x


def b_callable_torch(x):
    return x * 2 if callable(torch.relu) else x


def b_math_functions(x):
    return x * math.sqrt(16) + math.log(math.e) + math.floor(2.7) + math.ceil(0.2)


def b_math_trig_consts(x):
    return (
        x * math.cos(0.0) + math.sin(math.pi / 2) + math.exp(0) + (1.0 if math.inf > 1e308 else 0.0)
    )


def b_math_sqrt_of_dim(x):
    return x / math.sqrt(x.shape[-1])


def b_math_prod_isclose(x):
    n = math.prod(x.shape)
    return x * n if math.isclose(n, 12.0) else x


def b_max_on_tensor_list_via_builtin(x):
    return max(x.shape[0], 2) * x


def b_filter_map(x):
    vals = list(map(lambda v: v * 2, filter(lambda v: v > 1, [1, 2, 3])))
    return x * vals[-1]


def b_no_tensor_ops_int(x):
    return x.shape[0] * 2 + x.shape[1]


def b_no_tensor_ops_tuple(x):
    return (x.dim(), tuple(x.shape), x.dtype)


def b_no_tensor_ops_str(x):
    return f"{x.shape[0]}x{x.shape[1]}:{x.dtype}"


PROGRAMS = [
    Program(b_len_shape),
    Program(b_isinstance_tuple_types),
    Program(b_issubclass),
    Program(b_getattr_torch),
    Program(b_getattr_tensor_method),
    Program(b_hasattr_tensor),
    Program(b_range_list),
    Program(b_range_len_index),
    Program(b_enumerate_list),
    Program(b_zip_list),
    Program(b_min_max_ints),
    Program(b_min_max_list),
    Program(b_min_max_shapes),
    Program(b_min_with_key_const),
    Program(b_abs_round),
    Program(b_sum_ints),
    Program(b_sum_start),
    Program(b_sum_tensors, xy34),
    Program(b_any_all),
    Program(b_int_float_bool),
    Program(b_int_of_shape),
    Program(b_tuple_list_ctor),
    Program(b_dict_ctor_kwargs),
    Program(b_list_of_tensor),
    Program(b_tuple_of_generator),
    Program(b_sorted),
    Program(b_reversed_tuple),
    Program(b_divmod_pow),
    Program(b_str_repr),
    Program(b_type_check),
    Program(b_id_identity),
    Program(b_callable_torch),
    Program(b_math_functions),
    Program(b_math_trig_consts),
    Program(b_math_sqrt_of_dim),
    Program(b_math_prod_isclose),
    Program(b_max_on_tensor_list_via_builtin),
    Program(b_filter_map),
    Program(b_no_tensor_ops_int, graphs=0),
    Program(b_no_tensor_ops_tuple, graphs=0),
    Program(b_no_tensor_ops_str, graphs=0),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
