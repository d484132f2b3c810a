"""Breaks with live values on the stack and many live locals: the continuation must get them all.

A break in the middle of an expression (a call's arguments, a list or dict display, a binary
operation) leaves partial results on the stack; the resume function receives them as arguments.
"""

from __future__ import annotations

import collections
import dataclasses

import torch
from _breaks_harness import program, xy34
from torch import nn


@program(graphs=2)
def break_inside_list_display(x):
    return torch.stack([x.sum(), print("between") or x.mean()])


@program(graphs=2)
def break_inside_dict_display(x):
    return {"a": x * 2, "b": print("b") or x * 3}


@program(graphs=2)
def break_inside_call_arguments(x):
    return torch.add(x * 2, print("arg") or x, alpha=2)


@program(graphs=2)
def break_inside_binary_operation(x):
    return x.sin() * (print("rhs") or x.cos())


@program(graphs=2)
def break_inside_tuple_unpacking(x):
    a, b = x * 2, (print("second"), x + 1)[1]
    return a - b


@program(graphs=2)
def break_inside_method_call_arguments(x):
    return x.abs().clamp(min=-0.5, max=print("max") or 0.5).mul(3)


@program(graphs=2, inputs=xy34)
def many_live_locals_of_many_types(x, y):
    t = (x, y * 2)
    lst = [x + 1, None, "s", 3]
    d = {"k": y.cos(), "n": 2.5}
    name = "abc"
    nothing = None
    print("all live")
    return t[1] + lst[0] * d["n"] + d["k"], name, nothing, lst[1:], len(lst)


@program(graphs=2)
def deleted_local_before_break(x):
    tmp = x * 2
    y = tmp + 1
    del tmp
    print("deleted")
    return y * 2


@program(graphs=2)
def shadowed_local_across_break(x):
    x = x * 2
    print("rebound")
    x = x + 1
    return x


@program(graphs=3)
def while_true_with_break_statement(x):
    n = 0
    while True:
        x = x * 2
        n += 1
        if n == 2:
            break
        print("again")
    print("out")
    return x + n


@program(graphs=2)
def break_in_chained_comparison_of_python_values(x):
    y = x.relu()
    ok = 0 < (print("mid") or 1) < 2
    return y * 2 if ok else y


@program(graphs=2)
def break_inside_fstring(x):
    y = x + 1
    s = f"a{print('fmt') or 1}b{tuple(y.shape)}"
    return y * len(s)


# ----------------------------------------------------------------------------- live objects


_Pair = collections.namedtuple("_Pair", ["a", "b"])


@dataclasses.dataclass
class _Box2:
    t: torch.Tensor
    n: int


_LIN = nn.Linear(4, 4)


@program(graphs=2)
def live_list_iterator(x):
    it = iter([1, 2, 3])
    a = next(it)
    y = x * a
    print("iterating")
    return y * next(it)


@program(graphs=2)
def live_dict_keys_view_sees_later_insert(x):
    d = {"a": 1, "b": 2}
    keys = d.keys()
    y = x + 1
    print("keys", list(keys))
    d["c"] = 3
    return y * len(keys)


@program(graphs=2)
def live_dtype_device_and_size(x):
    dt, dev, shp = x.dtype, x.device, x.shape
    y = x.sin()
    print("meta")
    return torch.zeros(shp, dtype=dt, device=dev) + y


@program(graphs=2)
def live_namedtuple_built_inside(x):
    p = _Pair(x * 2, x + 1)
    print("pair")
    return p.a - p.b


@program(graphs=2)
def live_dataclass_built_inside(x):
    b = _Box2(x.cos(), 3)
    print("box")
    return b.t * b.n


@program(graphs=2)
def view_of_input_mutated_after_break(x):
    v = x[0]
    print("view")
    v.add_(1)
    return x.sum()


@program(graphs=2)
def live_slice_and_ellipsis(x):
    sl, e = slice(1, 3), ...
    y = x * 2
    print("slicing")
    return y[sl, e]


@program(graphs=2)
def live_set_mutated_after_break(x):
    s = {1, 2}
    y = x - 1
    print("set")
    s.add(3)
    return y * len(s)


@program(graphs=2)
def global_module_used_on_both_sides(x):
    h = _LIN(x)
    print("linear")
    return _LIN(h)


@program(graphs=2)
def live_generator_object(x):
    g = (i * 2 for i in range(3))
    first = next(g)
    y = x * first
    print("generator")
    return y + sum(g)


@program(graphs=2)
def star_unpacking_across_break(x):
    a, *rest = [x * 1, x * 2, x * 3]
    print("unpacked", len(rest))
    return rest[0] + rest[1] - a


@program(graphs=2)
def walrus_on_tensor_value(x):
    if (n := int((x > -100).sum())) > 0:
        return x * n
    return x


@program(graphs=1)
def returns_the_input_and_a_result(x):
    y = x * 2
    print("both")
    return x, y
