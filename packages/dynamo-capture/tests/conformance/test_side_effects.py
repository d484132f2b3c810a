"""Side effects replayed after the graph: list/dict/object/global/closure mutations, input mutation.

Each program's external state is reset by ``setup`` before the eager run and before the captured
run, and ``observe`` returns it for comparison; arguments are compared after the call as well.
"""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import Program, ids, randn, run_program, xy34
from torch import nn

LOG: list = []
CACHE: dict = {}
STATE = {"calls": 0}
TOTAL = 0.0
LAST = None


class Box:
    def __init__(self) -> None:
        self.value = 0
        self.history: list = []
        self.tensor = None


BOX = Box()


def _reset_log():
    LOG.clear()


def _reset_cache():
    CACHE.clear()


def _reset_state():
    STATE.clear()
    STATE["calls"] = 0


def _reset_box():
    BOX.value = 0
    BOX.history = []
    BOX.tensor = None


def _reset_globals():
    global TOTAL, LAST
    TOTAL = 0.0
    LAST = None


GLOBAL_ACC = torch.zeros(4)


def _reset_global_acc():
    GLOBAL_ACC.zero_()


def se_global_tensor_inplace(x):
    GLOBAL_ACC.add_(x.sum(0))
    return x * 2


def se_returns_none_after_append(x):
    LOG.append(x * 2)


def se_global_list_append(x):
    LOG.append("called")
    LOG.append(x.shape[0])
    return x + 1


def se_global_list_append_tensor(x):
    y = x * 2
    LOG.append(y)
    return y + 1


def se_global_list_extend_pop(x):
    LOG.extend([1, 2, 3])
    LOG.pop(0)
    LOG.insert(0, "head")
    return x - 1


def se_global_list_setitem_order(x):
    LOG.append(1)
    LOG[0] = 2
    LOG.append(LOG[0] + 1)
    del LOG[0]
    return x * 3


def se_global_dict_setitem(x):
    CACHE["out"] = x.sum(0)
    CACHE["n"] = len(CACHE)
    return x * 2


def se_global_dict_update_delete(x):
    CACHE.update(a=1, b=2)
    del CACHE["a"]
    CACHE.setdefault("c", 3)
    return x + len(CACHE)


def se_global_dict_counter(x):
    STATE["calls"] += 1
    STATE["last_shape"] = tuple(x.shape)
    return x * STATE["calls"]


def se_object_attribute(x):
    BOX.value = BOX.value + 5
    BOX.tensor = x.mean()
    return x + BOX.value


def se_object_list_attribute(x):
    BOX.history.append(x.shape[1])
    BOX.history.append("done")
    return x * len(BOX.history)


def se_object_new_attribute(x):
    BOX.extra_flag = True
    out = x * 2
    del BOX.extra_flag
    return out


def se_global_rebind(x):
    global TOTAL, LAST
    TOTAL = TOTAL + 1.5
    LAST = x * 2
    return x + TOTAL


def se_global_rebind_read_back(x):
    global TOTAL
    TOTAL = 10.0
    y = x * TOTAL
    TOTAL = TOTAL + 1.0
    return y


def _make_closure_counter():
    count = 0

    def se_closure_counter(x):
        nonlocal count
        count += 1
        return x * count

    def reset():
        nonlocal count
        count = 0

    def observe():
        return count

    return se_closure_counter, reset, observe


def _make_closure_list():
    seen = []

    def se_closure_list_append(x):
        seen.append(x.shape)
        return x.sum(1)

    return se_closure_list_append, seen.clear, lambda: list(seen)


def se_arg_list_append(x, items):
    items.append(x * 2)
    items.append("tag")
    return x + 1


def se_arg_dict_mutation(x, d):
    d["y"] = d["x"] * 3
    d.pop("x")
    return x - 1


def se_input_inplace_add(x):
    x.add_(1.0)
    return x * 2


def se_input_inplace_slice(x):
    x[0] = 0.0
    return x.sum()


def se_input_inplace_view_chain(x):
    x.view(-1)[::2].mul_(3.0)
    return x + 0


def se_input_inplace_only_no_return(x, y):
    y.copy_(x * 2)
    return x + y


def se_input_inplace_two_inputs(x, y):
    x.mul_(2)
    y.sub_(1)
    return x + y


def se_input_setitem_with_tensor(x, y):
    x[:, 1] = y[:, 0]
    return x.sum(0)


def se_input_inplace_then_read(x):
    before = x.clone()
    x.clamp_(min=0.0)
    return before - x


def se_input_in_list_mutated(items):
    items[0].add_(1.0)
    return items[0] * items[1]


def se_order_list_and_dict(x):
    LOG.append("a")
    CACHE["k"] = len(LOG)
    LOG.append("b")
    CACHE["k2"] = len(LOG)
    return x + CACHE["k2"]


def se_mutation_in_inlined_function(x):
    def record(v):
        LOG.append(v)

    record(1)
    record(x.shape[0])
    return x * 2


def se_list_created_and_mutated_returned(x):
    out = []
    for i in range(3):
        out.append(x * i)
    out.reverse()
    return out


class BufferUpdate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x):
        self.running.mul_(0.9).add_(x.mean(0) * 0.1)
        return x - self.running


class ModuleCounter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.calls += 1
        self.last = "forward"
        return self.lin(x)


_COUNTER_MOD = ModuleCounter()
_BUFFER_MOD = BufferUpdate()


def _reset_buffer_mod():
    _BUFFER_MOD.running.zero_()


def _reset_counter_mod():
    _COUNTER_MOD.calls = 0
    _COUNTER_MOD.__dict__.pop("last", None)


_cc, _cc_reset, _cc_observe = _make_closure_counter()
_cl, _cl_reset, _cl_observe = _make_closure_list()


def _reset_box_tensor():
    BOX.tensor = torch.ones(5)


def se_object_tensor_replaced_then_old_returned(x):
    # the returned tensor is the one the object held at the call's start, not its replacement
    old = BOX.tensor
    BOX.tensor = x * 2
    return old + 0, old, BOX.tensor.shape[0] + old.shape[0]


PROGRAMS = [
    Program(
        se_object_tensor_replaced_then_old_returned,
        setup=_reset_box_tensor,
        observe=lambda: BOX.tensor.shape,
    ),
    Program(se_global_tensor_inplace, setup=_reset_global_acc, observe=lambda: GLOBAL_ACC.clone()),
    Program(se_returns_none_after_append, setup=_reset_log, observe=lambda: list(LOG)),
    Program(se_global_list_append, setup=_reset_log, observe=lambda: list(LOG)),
    Program(se_global_list_append_tensor, setup=_reset_log, observe=lambda: list(LOG)),
    Program(se_global_list_extend_pop, setup=_reset_log, observe=lambda: list(LOG)),
    Program(se_global_list_setitem_order, setup=_reset_log, observe=lambda: list(LOG)),
    Program(se_global_dict_setitem, setup=_reset_cache, observe=lambda: dict(CACHE)),
    Program(se_global_dict_update_delete, setup=_reset_cache, observe=lambda: dict(CACHE)),
    Program(se_global_dict_counter, setup=_reset_state, observe=lambda: dict(STATE)),
    Program(se_object_attribute, setup=_reset_box, observe=lambda: (BOX.value, BOX.tensor)),
    Program(se_object_list_attribute, setup=_reset_box, observe=lambda: list(BOX.history)),
    Program(se_object_new_attribute, setup=_reset_box, observe=lambda: hasattr(BOX, "extra_flag")),
    Program(se_global_rebind, setup=_reset_globals, observe=lambda: (TOTAL, LAST)),
    Program(se_global_rebind_read_back, setup=_reset_globals, observe=lambda: TOTAL),
    Program(_cc, setup=_cc_reset, observe=_cc_observe, name="se_closure_counter"),
    Program(_cl, setup=_cl_reset, observe=_cl_observe, name="se_closure_list_append"),
    Program(se_arg_list_append, lambda: (randn(3, 4), [randn(2)])),
    Program(se_arg_dict_mutation, lambda: (randn(3, 4), {"x": randn(2)})),
    Program(se_input_inplace_add),
    Program(se_input_inplace_slice),
    Program(se_input_inplace_view_chain),
    Program(se_input_inplace_only_no_return, xy34),
    Program(se_input_inplace_two_inputs, xy34),
    Program(se_input_setitem_with_tensor, xy34),
    Program(se_input_inplace_then_read),
    Program(se_input_in_list_mutated, lambda: ([randn(3, 4), randn(3, 4)],)),
    Program(
        se_order_list_and_dict,
        setup=lambda: (_reset_log(), _reset_cache()),
        observe=lambda: (list(LOG), dict(CACHE)),
    ),
    Program(se_mutation_in_inlined_function, setup=_reset_log, observe=lambda: list(LOG)),
    Program(se_list_created_and_mutated_returned),
    Program(
        _BUFFER_MOD,
        lambda: (randn(3, 4),),
        setup=_reset_buffer_mod,
        observe=lambda: _BUFFER_MOD.running.clone(),
        name="BufferUpdate",
    ),
    Program(
        _COUNTER_MOD,
        lambda: (randn(3, 4),),
        setup=_reset_counter_mod,
        observe=lambda: (_COUNTER_MOD.calls, getattr(_COUNTER_MOD, "last", None)),
        name="ModuleCounter",
    ),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
