"""Mutations of lists, dicts, attributes, globals and input tensors across breaks.

Pending side effects must be applied before the code that runs eagerly at the break (a print of a
mutated dict shows the new value), and the state after the call must equal eager's.
"""

from __future__ import annotations

import torch
from _breaks_harness import program

_LOG: list = []
_G = {"t": None}
_TOTAL = 0


def _reset_log():
    _LOG.clear()


def _reset_g():
    _G["t"] = None


def _reset_total():
    global _TOTAL
    _TOTAL = 0


class Box:
    def __init__(self):
        self.v = None
        self.w = None


@program(graphs=2, setup=_reset_log, observe=lambda: list(_LOG))
def global_list_appended_around_break(x):
    _LOG.append(1)
    y = x * 2
    print("log so far", _LOG)
    _LOG.append(2)
    return y + len(_LOG)


@program(graphs=2, inputs=lambda: (torch.randn(3, 4), {}))
def dict_argument_mutated_across_break(x, d):
    d["a"] = x * 2
    print(sorted(d))
    d["b"] = d["a"] + 1
    return d["b"].sum()


@program(graphs=2, inputs=lambda: (torch.randn(3, 4), Box()))
def object_attributes_set_across_break(x, box):
    box.v = x + 1
    print(box.w is None)
    box.w = box.v * 2
    return box.w.sum()


@program(graphs=2, setup=_reset_g, observe=lambda: dict(_G))
def global_dict_holds_graph_output(x):
    _G["t"] = x * 2
    print("stored", _G["t"] is not None)
    _G["t"] = _G["t"] + 1
    return _G["t"].mean()


@program(graphs=2, setup=_reset_total, observe=lambda: _TOTAL)
def global_rebound_across_break(x):
    global _TOTAL
    _TOTAL = _TOTAL + 5
    y = x * _TOTAL
    print("total", _TOTAL)
    _TOTAL = _TOTAL * 2
    return y - _TOTAL


@program(graphs=2)
def local_dict_printed_after_update(x):
    y = x.abs()
    d = {"n": 1}
    d["n"] += 1
    print(d)
    return y * d["n"]


@program(graphs=1, inputs=lambda: (torch.randn(3, 4), []))
def list_printed_twice_between_appends(x, lst):
    lst.append("a")
    print(lst)
    lst.append("b")
    print(lst)
    return x * len(lst)


@program(graphs=2)
def input_tensor_mutated_in_place_across_break(x):
    x.mul_(2)
    print("doubled")
    x.add_(1)
    return x.clone()


@program(graphs=3, inputs=lambda: (torch.randn(3, 4), torch.zeros(3, 4)))
def out_tensor_filled_by_slices_across_breaks(x, out):
    out[0] = x[0] * 2
    print("row 0")
    out[1] = x[1] * 3
    print("row 1")
    out[2] = x[2] * 4
    return out.sum()


def _record(t, lst):
    lst.append(t.sum())
    print("recorded", len(lst))


@program(graphs=3, inputs=lambda: (torch.randn(3, 4), []))
def breaking_callee_appends_tensor_to_list(x, lst):
    y = x * 2
    _record(y, lst)
    return y + 1


@program(graphs=2, inputs=lambda: (torch.randn(3, 4), {"calls": 0}))
def counter_in_dict_read_after_break(x, stats):
    stats["calls"] += 1
    y = x.sin()
    print("calls", stats["calls"])
    stats["calls"] += 1
    return y * stats["calls"]


@program(graphs=2, inputs=lambda: (torch.randn(3, 4), [1, 2, 3]))
def list_argument_popped_and_extended(x, lst):
    last = lst.pop()
    y = x * last
    print(lst)
    lst.extend([last, last * 10])
    return y + len(lst)


@program(graphs=3)
def closure_cell_bumped_by_breaking_inner_function(x):
    count = 0

    def bump(t):
        nonlocal count
        count += 1
        print("bump", count)
        return t * count

    y = bump(x)
    z = bump(y)
    return z + count


@program(graphs=2, inputs=lambda: (torch.randn(3, 4), [3, 1, 2]))
def list_sorted_in_place_across_break(x, lst):
    lst.sort()
    y = x * lst[0]
    print(lst)
    lst.reverse()
    return y + lst[0]


# ----------------------------------------------------------------------------- aliasing


@program(graphs=1)
def two_names_for_one_list_across_break(x):
    a = []
    b = a
    print("aliased")
    a.append(1)
    a.append(2)
    return x * len(b)


@program(graphs=2)
def two_names_for_one_tensor_mutated_after_break(x):
    a = x * 2
    b = a
    print("aliased tensor")
    a.add_(1)
    return b


@program(graphs=2)
def view_of_graph_output_sees_later_mutation(x):
    a = x * 2
    v = a[0]
    print("view")
    a.add_(1)
    return v.clone(), a


@program(graphs=1)
def same_object_twice_in_a_list_across_break(x):
    obj = Box()
    lst = [obj, obj]
    print("identity")
    lst[0].v = 5
    return x * lst[1].v


def _reset_mode():
    global _MODE_FLAG
    _MODE_FLAG = 1


_MODE_FLAG = 1


def _set_mode(v):
    global _MODE_FLAG
    print("set mode", v)
    _MODE_FLAG = v


@program(graphs=2, setup=_reset_mode, observe=lambda: _MODE_FLAG)
def global_set_by_breaking_callee_read_after(x):
    y = x - 1
    _set_mode(3)
    return y * _MODE_FLAG


# ----------------------------------------------------------------------------- frame cells


@program(graphs=2)
def closure_reads_cell_assigned_after_break(x):
    def read():
        return n

    y = x * 2
    print("before n")
    n = 3
    return y + read()


@program(graphs=3)
def cell_written_after_break_seen_by_closure_called_twice(x):
    scale = 1.0

    def apply(t):
        return t * scale

    a = apply(x)
    print("first", a.shape)
    scale = 2.0
    b = apply(x)
    print("second")
    scale = scale + 1
    return a + b + apply(x)


# the caller's graph before the call, the helper's graph after its print (twice: `hits` is a
# guarded int, 1 then 2), the caller's graph after the second call
@program(graphs=4)
def nonlocal_counter_in_breaking_helper(x):
    calls = [0]
    hits = 0

    def note(t):
        nonlocal hits
        hits += 1
        calls[0] += 1
        print("note", hits)
        return t + hits

    y = note(x.cos())
    return note(y) * hits + calls[0]
