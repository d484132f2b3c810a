"""A torch operation's arguments as ``OutputGraph.call_tensor_op`` hands them on: trackers as FX
nodes (for the graph) or as fake values (to run the op for its result's metadata), and the
arguments eager would refuse or the graph's code could not spell, found before tracing."""

from __future__ import annotations

import math
import operator

import torch

from .exc import Unsupported
from .variables.base import ConstantVariable, is_numpy_scalar
from .variables.containers import DictVariable, ListVariable, TupleVariable
from .variables.symbolic import SliceVariable, SymNodeVariable
from .variables.tensors import TensorVariable

_SUBTRACTIONS = frozenset(
    {"sub", "sub_", "__sub__", "__rsub__", "__isub__", "subtract", "subtract_"}
)


def _is_subtraction(target) -> bool:
    if isinstance(target, str):
        return target in _SUBTRACTIONS
    return target in (operator.sub, operator.isub, torch.sub, torch.subtract, torch.rsub)


def _is_bool(x) -> bool:
    return type(x) is bool or (isinstance(x, torch.Tensor) and x.dtype == torch.bool)


def _has_negative_nan(x) -> bool:
    if type(x) is float:
        return x != x and math.copysign(1.0, x) < 0
    if isinstance(x, (tuple, list)):
        return any(_has_negative_nan(i) for i in x)
    if isinstance(x, dict):
        return any(_has_negative_nan(i) for i in x.values())
    return False


def _contains_tensor(x) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, (tuple, list)):
        return any(_contains_tensor(i) for i in x)
    return False


#: a Python scalar type where torch takes a dtype (``torch.tensor(0, dtype=int)``, ``x.to(float)``)
#: is that dtype to torch's argument parser; the graph's code cannot spell the type itself
_PYTHON_TYPE_DTYPES = {
    bool: torch.bool,
    int: torch.int64,
    float: torch.float64,
    complex: torch.complex128,
}


def _as_dtype(value):
    if isinstance(value, type) and value in _PYTHON_TYPE_DTYPES:
        return _PYTHON_TYPE_DTYPES[value]
    return value


def _map(v, what: str):
    if isinstance(v, TensorVariable):
        return v.node if what == "node" else v.fake
    if isinstance(v, SymNodeVariable):
        return v.node if what == "node" else v.value
    if isinstance(v, SliceVariable):
        return slice(*(_map(p, what) for p in v.parts))
    if isinstance(v, ConstantVariable):
        # a numpy scalar is a Python number to torch (np.float64(2) * a float32 tensor is
        # float32), and the graph's code spells Python numbers only
        return v.value.item() if is_numpy_scalar(v.value) else _as_dtype(v.value)
    if isinstance(v, TupleVariable):
        return tuple(_map(i, what) for i in v.items)
    if isinstance(v, ListVariable):
        return [_map(i, what) for i in v.items]
    if isinstance(v, DictVariable):
        return {k: _map(i, what) for k, i in v.items.items()}
    if v.is_python_constant():
        return _as_dtype(v.as_python_constant())
    raise Unsupported(f"passing a {type(v).__name__} to a torch operation")
