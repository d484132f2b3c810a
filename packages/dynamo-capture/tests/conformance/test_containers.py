# ruff: noqa: C406, C408, FLY002
# (the programs spell these constructs on purpose: each is bytecode capture must handle)
"""Building and unpacking lists, tuples, dicts, sets, slices and f-strings; namedtuples."""

from __future__ import annotations

import collections
from typing import NamedTuple

import pytest
import torch
from _conformance_harness import Program, ids, run_program

Pair = collections.namedtuple("Pair", ["first", "second"])


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    scale: float = 2.0


def build_list(x):
    items = [x, x + 1, x * 2]
    return items[0] + items[1] + items[2]


def build_list_append(x):
    items = []
    items.append(x)
    items.append(x.sin())
    return torch.stack(items)


def build_list_extend_insert(x):
    items = [x]
    items.extend([x * 2, x * 3])
    items.insert(0, x - 1)
    return torch.cat(items)


def build_list_pop(x):
    items = [x, x * 2, x * 3]
    last = items.pop()
    first = items.pop(0)
    return last - first + items[0]


def list_return(x):
    return [x + 1, x - 1]


def list_slice_read(x):
    items = [x, x * 2, x * 3, x * 4]
    return sum(items[1:3])


def list_slice_reverse(x):
    items = [x, x * 2, x * 3]
    rev = items[::-1]
    return rev[0] - rev[-1]


def list_slice_assign(x):
    items = [x, x, x, x]
    items[1:3] = [x * 5, x * 6]
    return torch.stack(items)


def list_concat_repeat(x):
    items = [x] + [x * 2]
    items = items * 2
    return torch.stack(items).sum(0)


def list_index_count(x):
    names = ["a", "b", "c", "b"]
    return x * names.index("c") + names.count("b")


def list_reverse_sort_consts(x):
    vals = [3, 1, 2]
    vals.sort()
    vals.reverse()
    return x * vals[0] + vals[2]


def list_len(x):
    items = [x, x, x]
    return x * len(items)


def list_unpack(x):
    a, b, c = [x, x * 2, x * 3]
    return a * b - c


def list_star_build(x):
    head = [x]
    tail = [x * 2, x * 3]
    items = [*head, x + 1, *tail]
    return torch.cat(items)


def build_tuple(x):
    t = (x, x * 2)
    return t[0] + t[1]


def tuple_return(x):
    return x * 2, x + 1


def tuple_nested_return(x):
    return (x, (x + 1, [x * 2]))


def tuple_star_build(x):
    t = (x, x * 2)
    u = (*t, x * 3)
    return torch.stack(u)


def tuple_concat(x):
    t = (x,) + (x * 2,)
    return t[1] - t[0]


def tuple_slice(x):
    t = tuple(x.unbind(0))
    return torch.stack(t[1:])


def tuple_compare_consts(x):
    return x * 2 if (1, 2) < (1, 3) else x


def build_dict(x):
    d = {"a": x, "b": x * 2}
    return d["a"] + d["b"]


def dict_return(x):
    return {"out": x + 1, "aux": x.sum()}


def dict_get_default(x):
    d = {"a": x}
    return d.get("a") + d.get("missing", 1.0)


def dict_update(x):
    d = {"a": x}
    d.update({"b": x * 2})
    d.update(c=x * 3)
    return d["a"] + d["b"] + d["c"]


def dict_pop_setdefault(x):
    d = {"a": x, "b": x * 2}
    a = d.pop("a")
    c = d.setdefault("c", x * 3)
    return a + c + d["b"]


def dict_keys_values_items(x):
    d = {"a": x, "b": x * 2}
    total = sum(d.values())
    names = list(d.keys())
    pairs = list(d.items())
    return total * len(names) + pairs[1][1]


def dict_comprehension_like_ctor(x):
    d = dict(a=x, b=x + 1)
    return d["b"] - d["a"]


def dict_from_pairs(x):
    d = dict([("p", x), ("q", x * 2)])
    return d["q"]


def dict_merge_operator(x):
    a = {"k": x}
    b = {"j": x * 2}
    c = a | b
    return c["k"] + c["j"]


def dict_star_build(x):
    base = {"a": x}
    d = {**base, "b": x * 3}
    return d["a"] * d["b"]


def dict_int_keys(x):
    d = {0: x, 1: x * 2}
    return d[1] - d[0]


def dict_contains_and_del(x):
    d = {"a": x, "b": x * 2}
    del d["a"]
    return x if "a" in d else d["b"]


def dict_return_ordered(x):
    d = collections.OrderedDict()
    d["z"] = x
    d["y"] = x + 1
    return d


def build_set(x):
    s = {1, 2, 3}
    s.add(4)
    return x * len(s)


def set_ops(x):
    a = {1, 2, 3}
    b = {2, 3, 4}
    return x * len(a & b) + len(a | b) + len(a - b)


def set_contains(x):
    allowed = {"relu", "gelu"}
    return torch.relu(x) if "relu" in allowed else x


def build_slice_object(x):
    s = slice(1, 3)
    return x[s]


def slice_from_shape(x):
    n = x.shape[1] // 2
    return x[:, :n] + x[:, n:]


def fstring_key(x):
    d = {f"layer_{i}": x * i for i in range(3)}
    return d["layer_2"]


def fstring_format_spec(x):
    name = f"{x.shape[0]:03d}-{1.5:.1f}"
    return x * len(name)


def string_concat_join(x):
    key = "_".join(["a", "b"]) + "c"
    return x * len(key)


def string_methods(x):
    name = "Hidden_States"
    if name.lower().startswith("hidden") and name.split("_")[1] == "States":
        return x + 1
    return x - 1


def namedtuple_build(x):
    p = Pair(x, x * 2)
    return p.first + p.second


def namedtuple_return(x):
    return Pair(x + 1, x - 1)


def namedtuple_index_unpack(x):
    p = Pair(x, x * 3)
    a, b = p
    return a + p[1] + b


def namedtuple_replace(x):
    p = Pair(x, x)
    q = p._replace(second=x * 4)
    return q.second - q.first


def typed_namedtuple_defaults(x):
    p = Point(x, x + 1)
    return (p.x + p.y) * p.scale


def typed_namedtuple_return(x):
    return Point(x, x * 2, 3.0)


PROGRAMS = [
    Program(build_list),
    Program(build_list_append),
    Program(build_list_extend_insert),
    Program(build_list_pop),
    Program(list_return),
    Program(list_slice_read),
    Program(list_slice_reverse),
    Program(list_slice_assign),
    Program(list_concat_repeat),
    Program(list_index_count),
    Program(list_reverse_sort_consts),
    Program(list_len),
    Program(list_unpack),
    Program(list_star_build),
    Program(build_tuple),
    Program(tuple_return),
    Program(tuple_nested_return),
    Program(tuple_star_build),
    Program(tuple_concat),
    Program(tuple_slice),
    Program(tuple_compare_consts),
    Program(build_dict),
    Program(dict_return),
    Program(dict_get_default),
    Program(dict_update),
    Program(dict_pop_setdefault),
    Program(dict_keys_values_items),
    Program(dict_comprehension_like_ctor),
    Program(dict_from_pairs),
    Program(dict_merge_operator),
    Program(dict_star_build),
    Program(dict_int_keys),
    Program(dict_contains_and_del),
    Program(dict_return_ordered),
    Program(build_set),
    Program(set_ops),
    Program(set_contains),
    Program(build_slice_object),
    Program(slice_from_shape),
    Program(fstring_key),
    Program(fstring_format_spec),
    Program(string_concat_join),
    Program(string_methods),
    Program(namedtuple_build),
    Program(namedtuple_return),
    Program(namedtuple_index_unpack),
    Program(namedtuple_replace),
    Program(typed_namedtuple_defaults),
    Program(typed_namedtuple_return),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
