"""Binary, unary, in-place, comparison, containment and identity operators."""

from __future__ import annotations

import operator

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, xy34


def pos34():
    return (randn(3, 4).abs() + 0.5, randn(3, 4).abs() + 0.5)


def int34():
    return (torch.randint(-8, 8, (3, 4)), torch.randint(1, 8, (3, 4)))


def bool34():
    return (randn(3, 4) > 0, randn(3, 4) > 0)


def mat():
    return (randn(3, 4), randn(4, 5))


def op_add(x, y):
    return x + y


def op_sub(x, y):
    return x - y


def op_mul(x, y):
    return x * y


def op_truediv(x, y):
    return x / y


def op_floordiv(x, y):
    return x // y


def op_mod(x, y):
    return x % y


def op_pow(x, y):
    return x**y


def op_matmul(x, y):
    return x @ y


def op_and(x, y):
    return x & y


def op_or(x, y):
    return x | y


def op_xor(x, y):
    return x ^ y


def op_lshift(x, y):
    return x << 1


def op_rshift(x, y):
    return x >> 1


def op_neg(x):
    return -x


def op_pos(x):
    return +x


def op_invert(x, y):
    return ~x


def op_abs(x):
    return abs(x)


def op_radd_scalar(x):
    return 1.0 + x


def op_rsub_scalar(x):
    return 1.0 - x


def op_rmul_scalar(x):
    return 3 * x


def op_rtruediv_scalar(x, y):
    return 1.0 / x


def op_rpow_scalar(x):
    return 2.0**x


def op_iadd_tensor(x, y):
    z = x.clone()
    z += y
    return z


def op_isub_tensor(x, y):
    z = x.clone()
    z -= y
    return z


def op_imul_tensor(x, y):
    z = x.clone()
    z *= y
    return z


def op_itruediv_tensor(x, y):
    z = x.clone()
    z /= y
    return z


def op_imatmul_rebind(x, y):
    z = x
    z @= y
    return z


def op_iadd_rebind_local(x):
    z = x
    z = z + 1
    z += 2
    return z


def op_iadd_int(x):
    n = 1
    n += 2
    n *= 3
    n -= 1
    n //= 2
    return x * n


def op_iadd_list(x):
    items = [x]
    items += [x * 2]
    return items[0] + items[1]


def op_lt(x, y):
    return x < y


def op_le(x, y):
    return x <= y


def op_gt(x, y):
    return x > y


def op_ge(x, y):
    return x >= y


def op_eq(x, y):
    return x == y


def op_ne(x, y):
    return x != y


def op_compare_scalar(x):
    return (x > 0.5) & (x < 1.5)


def op_compare_const_ints(x):
    a, b = 3, 4
    return x * (a < b) + x * (a == b) + x * (a >= b)


def op_chained_compare_consts(x):
    n = x.shape[0]
    if 1 < n < 5:
        return x + 1
    return x - 1


def op_is_none(x):
    y = None
    return x + 1 if y is None else x


def op_is_not(x):
    a = [1]
    b = a
    return x * 2 if a is b else x


def op_contains_list(x):
    modes = ["relu", "gelu"]
    return torch.relu(x) if "relu" in modes else x


def op_not_contains(x):
    modes = ("relu",)
    return x + 1 if "tanh" not in modes else torch.tanh(x)


def op_contains_dict(x):
    d = {"a": 1}
    return x * 2 if "a" in d else x


def op_contains_string(x):
    name = "layer_norm"
    return x * 2 if "norm" in name else x


def op_not_bool(x):
    flag = False
    return x + 1 if not flag else x


def op_and_or_short_circuit(x):
    a, b = 0, 5
    n = a or b
    m = a and b
    return x * n + m


def op_operator_module(x, y):
    return operator.add(operator.mul(x, y), operator.neg(x))


def op_operator_getitem(x):
    return operator.getitem(x, 1)


def op_operator_itemgetter(x):
    return operator.itemgetter(0, 2)(x.unbind(0))[1]


def op_operator_attrgetter(x):
    return x + operator.attrgetter("shape")(x)[0]


def op_operator_truediv_consts(x):
    return x * operator.truediv(3, 2)


def op_tensor_scalar_mix(x):
    return (x * 2 + 1) / 3 - 0.5


def op_int_tensor_div(x, y):
    return x / y


def op_bool_tensor_ops(x, y):
    return (x & ~y) | (x ^ y)


PROGRAMS = [
    Program(op_add, xy34),
    Program(op_sub, xy34),
    Program(op_mul, xy34),
    Program(op_truediv, pos34),
    Program(op_floordiv, int34),
    Program(op_mod, int34),
    Program(op_pow, pos34),
    Program(op_matmul, mat),
    Program(op_and, bool34),
    Program(op_or, bool34),
    Program(op_xor, int34),
    Program(op_lshift, int34),
    Program(op_rshift, int34),
    Program(op_neg),
    Program(op_pos),
    Program(op_invert, int34),
    Program(op_abs),
    Program(op_radd_scalar),
    Program(op_rsub_scalar),
    Program(op_rmul_scalar),
    Program(op_rtruediv_scalar, pos34),
    Program(op_rpow_scalar),
    Program(op_iadd_tensor, xy34),
    Program(op_isub_tensor, xy34),
    Program(op_imul_tensor, xy34),
    Program(op_itruediv_tensor, pos34),
    Program(op_imatmul_rebind, mat),
    Program(op_iadd_rebind_local),
    Program(op_iadd_int),
    Program(op_iadd_list),
    Program(op_lt, xy34),
    Program(op_le, xy34),
    Program(op_gt, xy34),
    Program(op_ge, xy34),
    Program(op_eq, int34),
    Program(op_ne, int34),
    Program(op_compare_scalar),
    Program(op_compare_const_ints),
    Program(op_chained_compare_consts),
    Program(op_is_none),
    Program(op_is_not),
    Program(op_contains_list),
    Program(op_not_contains),
    Program(op_contains_dict),
    Program(op_contains_string),
    Program(op_not_bool),
    Program(op_and_or_short_circuit),
    Program(op_operator_module, xy34),
    Program(op_operator_getitem),
    Program(op_operator_itemgetter),
    Program(op_operator_attrgetter),
    Program(op_operator_truediv_consts),
    Program(op_tensor_scalar_mix),
    Program(op_int_tensor_div, int34),
    Program(op_bool_tensor_ops, bool34),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
