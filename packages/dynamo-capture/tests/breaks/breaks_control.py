"""Branches on tensor values: ``if x.sum() > 0``, ``bool``/``int``/``float`` of a tensor, ``assert``.

Inputs are chosen so each branch takes the same side on every call (``p34``: positive values,
``n34``: negative), so a second call compiles nothing new; Python values that flow on from a
tensor are deterministic for the same reason (e.g. ``(x > -100).sum()`` is always the element count).
"""

from __future__ import annotations

import torch
from _breaks_harness import n34, p34, program


@program(graphs=2, inputs=p34)
def if_sum_positive(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


@program(graphs=2, inputs=n34)
def if_sum_negative(x):
    if x.sum() > 0:
        return x + 1
    return x - 1


@program(graphs=2, inputs=p34)
def if_else_then_common_tail(x):
    y = x * 2
    if y.mean() > 0:
        y = y + 1
    else:
        y = y - 1
    return y.relu()


@program(graphs=1, inputs=p34)
def if_taken_side_has_no_tensor_ops(x):
    if x.sum() > 0:
        return "positive"
    return x * 0


@program(graphs=2, inputs=p34)
def if_bool_of_tensor(x):
    if bool(x.max() > 0):
        return x * 2
    return x * 3


@program(graphs=2, inputs=p34)
def if_tensor_all(x):
    if (x > 0).all():
        return x.log()
    return x


@program(graphs=2, inputs=p34)
def if_not_tensor_any(x):
    if not (x < 0).any():
        return x.sqrt()
    return x.abs().sqrt()


@program(graphs=2)
def int_of_tensor_scales(x):
    n = int((x > -100).sum())
    return x * n


@program(graphs=2)
def float_of_tensor_shifts(x):
    s = float((x * 0).abs().sum())
    return x + s


@program(graphs=4)
def while_tensor_condition_and_counter(x):
    i = 0
    while (x.abs() < 100).all() and i < 3:
        x = x + 1
        i += 1
    return x


@program(graphs=2)
def ternary_on_tensor(x):
    y = x * 2 if x.mean() > -10 else x * 3
    return y + 1


@program(graphs=3, inputs=p34)
def nested_if_on_tensors(x):
    if x.sum() > 0:
        if x.max() > 0.05:
            return x * 2
        return x * 3
    return x * 4


@program(graphs=3, inputs=p34)
def if_elif_else_on_tensor(x):
    m = x.mean()
    if m > 5:
        return x - 5
    elif m > 0:
        return x * m
    else:
        return x + m


@program(graphs=2, inputs=p34)
def assert_on_tensor_passes(x):
    assert (x > 0).all(), "x must be positive"
    return x.log()


@program(graphs=1, inputs=n34, raises=AssertionError)
def assert_on_tensor_fails(x):
    assert (x > 0).all(), "x must be positive"
    return x.log()


@program(graphs=2, inputs=p34)
def branch_then_print(x):
    y = x * 2
    if y.sum() > 0:
        print("positive")
    return y + 1


@program(graphs=2)
def range_bound_from_tensor(x):
    n = int((x.abs() >= 0).all()) + 1
    for _ in range(n):
        x = x * 0.5
    return x


@program(graphs=2)
def branch_on_item_bool(x):
    if (x > -100).all().item():
        x = x + 1
    return x * 2


@program(graphs=2, inputs=p34)
def branch_result_as_python_bool(x):
    positive = bool(x.min() > 0)
    y = x.exp()
    return y if positive else -y, positive


@program(graphs=3, inputs=lambda: (torch.rand(3, 4) + 0.1, -(torch.rand(3, 4) + 0.1)))
def two_branches_on_two_inputs(x, y):
    a = x + y
    if x.sum() > 0:
        a = a * 2
    if y.sum() > 0:
        a = a * 3
    else:
        a = a - 3
    return a


@program(graphs=2, inputs=p34)
def branch_inside_with_no_grad(x):
    with torch.no_grad():
        if x.sum() > 0:
            y = x * 2
        else:
            y = x * 3
    return y + x


@program(graphs=2)
def python_and_short_circuits_before_tensor(x):
    flag = False
    y = x.relu()
    if flag and y.sum() > 0:
        y = y * 100
    print("after")
    return y - 1


@program(graphs=1)
def boolean_mask_index_at_the_end(x):
    return x[x > 0]


@program(graphs=1)
def nonzero_at_the_end(x):
    return torch.nonzero(x > 0)


@program(graphs=2)
def boolean_mask_index_after_a_print(x):
    y = x * 2
    print("masking")
    return y[y > 0]
