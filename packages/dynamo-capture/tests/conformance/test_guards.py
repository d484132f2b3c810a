"""Guards: a change to anything capture relied on causes exactly one recompile, with correct results.

Each case: two calls in the original state (one graph, then a cache hit), a change (one more
backend call), a second call in the changed state (cache hit), then the original state again (the
first entry still hits).
"""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import GuardCase, ids, randn, run_guard_case, x34, xy34
from torch import nn

SCALE = 2.0
FLAG = True
MODE = "relu"
OPTIONAL_BIAS = None
WEIGHTS = [1.0, 2.0]
TABLE = {"a": 1.0}
ACTIVATION = torch.relu


class Config:
    def __init__(self) -> None:
        self.eps = 1e-5
        self.use_residual = True


CONFIG = Config()


def _set(name, value):
    def apply():
        globals()[name] = value

    return apply


def g_global_float(x):
    return x * SCALE


def g_global_bool(x):
    return x + 1 if FLAG else x - 1


def g_global_string(x):
    return torch.relu(x) if MODE == "relu" else torch.tanh(x)


def g_global_none_to_tensor(x):
    if OPTIONAL_BIAS is None:
        return x * 2
    return x + OPTIONAL_BIAS


def g_global_list_length(x):
    for w in WEIGHTS:
        x = x * w
    return x


def g_global_list_value(x):
    return x * WEIGHTS[0]


def g_global_dict_keys(x):
    return x + len(TABLE)


def g_global_function(x):
    return ACTIVATION(x)


def g_object_attribute(x):
    return x + CONFIG.eps * 1e5


def g_object_flag(x):
    return x * 2 + x if CONFIG.use_residual else x * 2


def g_object_attribute_added(x):
    return x * 3 if hasattr(CONFIG, "extra") else x - 1


def g_shape(x):
    return x.sum(0) * x.shape[1]


def g_dtype(x):
    return x * 2


def g_ndim(x):
    return x.flatten() + 1


def g_requires_grad(x):
    return x * 2


def g_arg_python_int(x, n):
    return x * n


def g_arg_none_vs_tensor(x, y):
    return x * 2 if y is None else x + y


def g_arg_list_length(xs):
    return sum(xs)


def g_arg_tuple_to_list_type(xs):
    return xs[0] * 2


def g_arg_kwarg_flag(x, flag):
    return x + 1 if flag else x - 1


def g_aliased_inputs(x, y):
    x.add_(1.0)
    return x + y


def _same_tensor_twice():
    t = randn(3, 4)
    return (t, t)


def _make_closure_case():
    k = 2.0

    def g_closure_value(x):
        return x * k

    def change():
        g_closure_value.__closure__[0].cell_contents = 5.0

    def restore():
        g_closure_value.__closure__[0].cell_contents = 2.0

    return GuardCase(g_closure_value, x34, change=change, restore=restore)


def _make_closure_flag_case():
    use = True

    def g_closure_flag(x):
        return x.sin() if use else x.cos()

    def set_use(v):
        def apply():
            g_closure_flag.__closure__[0].cell_contents = v

        return apply

    return GuardCase(g_closure_flag, x34, change=set_use(False), restore=set_use(True))


class Flagged(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.use_act = True
        self.scale = 1.0

    def forward(self, x):
        y = self.lin(x) * self.scale
        return torch.relu(y) if self.use_act else y


class TrainEval(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.drop(self.lin(x))
        return y * 2 if self.training else y


_FLAGGED = Flagged()
_FLAGGED_SCALE = Flagged()
_TRAIN = TrainEval()
_SUBMOD_FLAG = nn.Sequential(TrainEval())
_HOOKED = Flagged()
_SWAPPED = Flagged()
_ORIGINAL_LIN = _SWAPPED.lin
_OTHER_LIN = nn.Linear(4, 4)
_hook_handles: list = []


def _set_attr(obj, name, value):
    def apply():
        setattr(obj, name, value)

    return apply


def _add_hook():
    _hook_handles.append(_HOOKED.lin.register_forward_hook(lambda m, i, o: o * 10))


def _remove_hooks():
    while _hook_handles:
        _hook_handles.pop().remove()


def _del_extra():
    if hasattr(CONFIG, "extra"):
        del CONFIG.extra


CASES = [
    GuardCase(g_global_float, change=_set("SCALE", 3.0), restore=_set("SCALE", 2.0)),
    GuardCase(g_global_bool, change=_set("FLAG", False), restore=_set("FLAG", True)),
    GuardCase(g_global_string, change=_set("MODE", "tanh"), restore=_set("MODE", "relu")),
    GuardCase(
        g_global_none_to_tensor,
        change=_set("OPTIONAL_BIAS", torch.ones(4)),
        restore=_set("OPTIONAL_BIAS", None),
    ),
    GuardCase(
        g_global_list_length,
        change=_set("WEIGHTS", [1.0, 2.0, 3.0]),
        restore=_set("WEIGHTS", [1.0, 2.0]),
    ),
    GuardCase(
        g_global_list_value, change=_set("WEIGHTS", [4.0, 2.0]), restore=_set("WEIGHTS", [1.0, 2.0])
    ),
    GuardCase(
        g_global_dict_keys,
        change=_set("TABLE", {"a": 1.0, "b": 2.0}),
        restore=_set("TABLE", {"a": 1.0}),
    ),
    GuardCase(
        g_global_function,
        change=_set("ACTIVATION", torch.sigmoid),
        restore=_set("ACTIVATION", torch.relu),
    ),
    GuardCase(
        g_object_attribute,
        change=_set_attr(CONFIG, "eps", 1e-3),
        restore=_set_attr(CONFIG, "eps", 1e-5),
    ),
    GuardCase(
        g_object_flag,
        change=_set_attr(CONFIG, "use_residual", False),
        restore=_set_attr(CONFIG, "use_residual", True),
    ),
    GuardCase(g_object_attribute_added, change=_set_attr(CONFIG, "extra", 1), restore=_del_extra),
    _make_closure_case(),
    _make_closure_flag_case(),
    GuardCase(
        _FLAGGED,
        change=_set_attr(_FLAGGED, "use_act", False),
        restore=_set_attr(_FLAGGED, "use_act", True),
        name="module_flag",
    ),
    GuardCase(
        _FLAGGED_SCALE,
        change=_set_attr(_FLAGGED_SCALE, "scale", 0.5),
        restore=_set_attr(_FLAGGED_SCALE, "scale", 1.0),
        name="module_float_attribute",
    ),
    GuardCase(_TRAIN, change=_TRAIN.eval, restore=_TRAIN.train, name="module_training"),
    GuardCase(
        _SUBMOD_FLAG,
        change=_SUBMOD_FLAG.eval,
        restore=_SUBMOD_FLAG.train,
        name="submodule_training",
    ),
    GuardCase(_HOOKED, change=_add_hook, restore=_remove_hooks, name="module_hook_added"),
    GuardCase(g_aliased_inputs, xy34, changed_inputs=_same_tensor_twice),
    GuardCase(
        _SWAPPED,
        change=_set_attr(_SWAPPED, "lin", _OTHER_LIN),
        restore=_set_attr(_SWAPPED, "lin", _ORIGINAL_LIN),
        name="submodule_replaced",
    ),
    GuardCase(g_shape, x34, changed_inputs=lambda: (randn(5, 4),), name="g_shape_dim0"),
    GuardCase(g_shape, x34, changed_inputs=lambda: (randn(3, 6),), name="g_shape_dim1_used_as_int"),
    GuardCase(g_dtype, x34, changed_inputs=lambda: (randn(3, 4, dtype=torch.float64),)),
    GuardCase(g_ndim, x34, changed_inputs=lambda: (randn(3, 4, 2),)),
    GuardCase(g_requires_grad, x34, changed_inputs=lambda: (randn(3, 4).requires_grad_(),)),
    GuardCase(g_arg_python_int, lambda: (randn(3, 4), 2), changed_inputs=lambda: (randn(3, 4), 3)),
    GuardCase(g_arg_none_vs_tensor, lambda: (randn(3, 4), None), changed_inputs=xy34),
    GuardCase(
        g_arg_list_length,
        lambda: ([randn(3, 4), randn(3, 4)],),
        changed_inputs=lambda: ([randn(3, 4)] * 3,),
    ),
    GuardCase(
        g_arg_tuple_to_list_type, lambda: ((randn(3, 4),),), changed_inputs=lambda: ([randn(3, 4)],)
    ),
    GuardCase(
        g_arg_kwarg_flag, lambda: (randn(3, 4), True), changed_inputs=lambda: (randn(3, 4), False)
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_guard(case: GuardCase) -> None:
    run_guard_case(case)


def test_guard_survives_param_update_without_recompile() -> None:
    """An in-place weight update is seen by the graph (get_attr binds the same Parameter)."""
    from _conformance_harness import RecordingBackend, assert_same, compile_with

    model = Flagged()
    backend = RecordingBackend()
    compiled = compile_with(model, backend)
    x = randn(3, 4)
    assert_same(compiled(x), model(x), rtol=None, atol=None)
    with torch.no_grad():
        model.lin.weight.mul_(2.0)
        model.lin.bias.add_(1.0)
    x = randn(3, 4)
    assert_same(compiled(x), model(x), rtol=None, atol=None)
    assert backend.calls == 1
