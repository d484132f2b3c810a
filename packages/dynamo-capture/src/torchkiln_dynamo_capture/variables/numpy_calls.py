"""Where the translator meets numpy (numpy_arrays.py says how arrays are traced): which calls
are numpy calls this family traces (``is_numpy_call``, ``call_numpy``), ndarrays made from
tensors (``as_ndarray``) and met as inputs (``ndarray_input``), operators with an ndarray operand
(``numpy_operator``) and arrays turned back into tensors (``to_tensor``).
"""

from __future__ import annotations

import operator
import types

import torch

try:
    import numpy as np
except ImportError:  # numpy is optional (the "numpy" extra): without it no ndarray is made here
    np = None

from torchkiln_guards import TypeMatch

from .._overlap import INPLACE_OPERATORS
from .._sources import LocalSource, TensorOfArraySource
from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker, all_constant, hashable
from .numpy_arrays import NumpyNdarrayVariable, has_array, numpy_op, numpy_oracle
from .numpy_nodes import (
    METADATA_FUNCTIONS,
    function_node,
    numpy_callable,
    numpy_dtype,
    numpy_function,
    ufunc_node,
)
from .numpy_ufuncs import OPERATOR_UFUNCS
from .tensors import TensorVariable

#: what turns a tensor into an ndarray (``np.asarray(t)``): the same values, as an array
CONVERTERS = frozenset(
    {np.asarray, np.array, np.asanyarray, np.ascontiguousarray} if np is not None else ()
)


#: torch functions that turn an ndarray back into a tensor
TO_TENSOR = frozenset({torch.from_numpy, torch.as_tensor, torch.asarray, torch.tensor})


# an ndarray also writes itself in ``a @= b``
_IN_PLACE_OPERATORS = INPLACE_OPERATORS | {operator.imatmul}


def is_ndarray(value) -> bool:
    return np is not None and type(value) is np.ndarray


def ndarray_input(tx, value, source) -> NumpyNdarrayVariable | None:
    """An ndarray met at ``source``: a graph input ``torch.from_numpy(<source>)`` (guarded as a
    tensor there), or None for an array torch cannot share (negative strides, a byte order or
    dtype torch lacks), which stays a plain object whose numpy calls run in Python."""
    try:
        tensor = torch.from_numpy(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    tx.out.guards.append(TypeMatch(source, np.ndarray))
    array = NumpyNdarrayVariable(tx.out.wrap_input_tensor(tx, tensor, TensorOfArraySource(source)))
    array.source = source  # returned as it is, the caller's own array comes back
    return array


def as_ndarray(tx, tensor: TensorVariable) -> NumpyNdarrayVariable:
    """``t.numpy()`` / ``np.asarray(t)``: the tensor's values as an ndarray (no graph node)."""
    fake = tensor.fake
    if fake.requires_grad:
        raise Unsupported(
            "an ndarray of a tensor that requires grad (eager raises RuntimeError)",
            "it runs in Python, which raises eager's error; call .detach() first",
        )
    if fake.device.type != "cpu":
        raise Unsupported(
            f"an ndarray of a {fake.device.type} tensor (eager raises TypeError)",
            "it runs in Python, which raises eager's error; call .cpu() first",
        )
    numpy_dtype(fake.dtype)
    return NumpyNdarrayVariable(tensor)


def is_traced_numpy_function(fn) -> bool:
    """A numpy function written in Python that the table has (``np.full``, ``np.outer``): called
    as one numpy call (``call_numpy``), not inlined into numpy's own internals."""
    return isinstance(fn, types.FunctionType) and numpy_function(fn) is not None


def is_numpy_call(fn, args: list, kwargs: dict) -> bool:
    """Whether ``fn(*args, **kwargs)`` is a numpy call this family traces: a numpy function on
    an ndarray it tracks, or one of ``CONVERTERS`` on a tensor."""
    if not hashable(fn):
        return False
    if fn in CONVERTERS and args and isinstance(args[0], (TensorVariable, NumpyNdarrayVariable)):
        return True
    if not numpy_callable(fn):
        return False
    # on constants too (np.zeros(3), np.arange(n)): an array made at capture time would be one
    # object shared by every call, and a call writing into it changed what the next call got
    return (
        has_array(args)
        or has_array(kwargs.values())
        or all_constant(args, kwargs)
        and numpy_function(fn) is not None
    )


def call_numpy(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    if fn in CONVERTERS and isinstance(args[0], (TensorVariable, NumpyNdarrayVariable)):
        array = as_ndarray(tx, args[0]) if isinstance(args[0], TensorVariable) else args[0]
        if len(args) == 1 and not kwargs and fn is not np.array:
            return array  # np.asarray(a) is a itself; np.array(a) copies (a node below)
        args = [array, *args[1:]]
    if not (has_array(args) or has_array(kwargs.values())):
        made = numpy_oracle(fn, args, kwargs)[0]  # all constant: numpy's own result
        if isinstance(made, np.generic) and not _read_from_frame(args, kwargs):
            # immutable: its methods run now. Made from a module's attribute or a global (CTRL's
            # np.sqrt(self.d_model_size)), it specializes the graph no further than they do:
            # capture guards each constant it reads on its value
            return ConstantVariable(made)
        if not isinstance(made, np.ndarray):
            return tx.wrap(made, None)  # a dtype, shape...: an immutable constant
    if hashable(fn) and fn in METADATA_FUNCTIONS and len(args) == 1 and not kwargs:
        if isinstance(args[0], NumpyNdarrayVariable):
            return args[0].var_getattr(tx, METADATA_FUNCTIONS[fn])
    entry = numpy_function(fn)
    if entry is None:
        raise Unsupported(
            f"numpy.{getattr(fn, '__name__', fn)} (not in capture's numpy table, so capture "
            "cannot trace it)",
            "it runs in Python on real arrays between two graphs",
        )
    if isinstance(fn, np.ufunc):
        return numpy_op(tx, ufunc_node(fn), args, kwargs, oracle=fn, ufunc=fn)
    return numpy_op(tx, function_node(fn), args, kwargs, oracle=fn)


def _read_from_frame(args: list, kwargs: dict) -> bool:
    """Whether a constant argument is a local of the frame (a float read out of a tensor and
    handed over a break is one, an int argument another): a numpy scalar made from it stays an
    object whose use breaks the graph, instead of a constant that would specialize the graph on
    a value that may change on every call. An attribute (``self.d_model_size``) or a global, a
    model's configuration, is no such value."""
    return any(isinstance(v.source, LocalSource) for v in [*args, *kwargs.values()])


def to_tensor(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    """``torch.from_numpy(a)`` / ``torch.as_tensor(a)`` / ``torch.tensor(a)`` of a traced array."""
    array = args[0]
    if array.scalar and fn is torch.from_numpy:
        raise Unsupported("torch.from_numpy of a numpy scalar (eager raises TypeError)")
    t = array.tensor
    if fn is torch.from_numpy:
        return t
    if fn is torch.tensor:  # a copy, as torch.tensor makes
        t = tx.out.call_tensor_op(tx, "call_method", "clone", [t], {})
        if kwargs:
            return tx.out.call_tensor_op(tx, "call_method", "to", [t], kwargs)
        return t
    return tx.out.call_tensor_op(tx, "call_function", torch.as_tensor, [t, *args[1:]], kwargs)


def is_numpy_scalar_type(fn) -> bool:
    """``np.float32``, ``np.int64``...: called on constants they make an immutable constant."""
    return np is not None and isinstance(fn, type) and issubclass(fn, np.generic)


def numpy_operator(tx, fn, args: list) -> VariableTracker:
    """``a + b``, ``a < b``, ``-a``... with an ndarray operand (operators.py and the translator's
    unary opcodes hand them here): numpy's ufunc behind the operator."""
    if fn in _IN_PLACE_OPERATORS and isinstance(args[0], NumpyNdarrayVariable):
        raise Unsupported(
            f"an in-place operator ({fn.__name__}) on an ndarray (it may share memory with a tensor)",
            "it runs in Python between two graphs",
        )
    ufunc = OPERATOR_UFUNCS.get(fn)
    if ufunc is None:
        raise Unsupported(
            f"the operator {fn.__name__} on an ndarray (not in capture's numpy table)",
            "it runs in Python on real arrays between two graphs",
        )
    return numpy_op(tx, ufunc_node(ufunc), args, {}, oracle=fn, ufunc=ufunc)


__all__ = [
    "CONVERTERS",
    "TO_TENSOR",
    "as_ndarray",
    "call_numpy",
    "is_ndarray",
    "is_numpy_call",
    "is_numpy_scalar_type",
    "is_traced_numpy_function",
    "ndarray_input",
    "numpy_operator",
    "to_tensor",
]
