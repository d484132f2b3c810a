"""numpy on tensors' values: an ndarray made from a tensor is a tensor in the graph.

TorchDynamo traces numpy code (``t.numpy()``, ``np.asarray(t)``, then numpy functions, ndarray
methods, attributes and operators) into the graph and hands ndarrays back to Python at its
outputs. So does this family: a ``NumpyNdarrayVariable`` wraps the TensorVariable holding the
array's values; each numpy call is one graph node (``numpy_op``) whose target (``numpy_node``)
runs that call's entry in capture's own numpy table (numpy_table.py, numpy_ufuncs.py: numpy's
semantics written in torch operations), so fake tensors give its metadata and make_fx later
traces it into aten operations. Where the translator meets numpy (which calls are numpy calls,
arrays made from tensors and from inputs, operators, back to tensors) is numpy_calls.py.

numpy's own result decides what the node must give: before a node is added, the call runs in
real numpy on stand-in arrays of ones with the same dtypes and shapes (``numpy_oracle``). Its
result's dtype is handed to the entry, which computes in it (numpy's promotion is numpy's: int64
/ 2 is float64, np.mean of ints is float64), and a result of another dtype or shape than the
oracle's breaks the graph (never a silently different array); a numpy scalar result
(``np.sum(a)``, ``a[0, 1]``) is handed back as a numpy scalar, not a 0-d array.

What breaks the graph, with its reason: numpy calls the table lacks (named), values needed in
Python (``bool``/``int``/``float`` of an array, ``.item()``, ``.tolist()``), in-place array
updates (``a += 1``, ``a[i] = v``: the array may share memory with a tensor), arrays mixed with
tensors in one operation, and an ndarray of a tensor that requires grad or is not on the CPU
(eager raises).
"""

from __future__ import annotations

import inspect
import operator
import warnings

import torch

try:
    import numpy as np
except ImportError:  # numpy is optional (the "numpy" extra): without it no ndarray is made here
    np = None

from .._sources import source_code
from ..exc import Unsupported
from .base import BoundMethodVariable, ConstantVariable, VariableTracker
from .containers import ListVariable, TupleVariable
from .numpy_nodes import (
    ARRAY_METADATA,
    DATA_DEPENDENT_METHODS,
    GETITEM,
    IN_PLACE_METHODS,
    attribute_node,
    is_numpy_dtype,
    method_node,
    method_oracle,
    numpy_dtype,
    torch_dtype,
    torch_dtype_of,
)
from .numpy_table import NDARRAY_ATTRIBUTES, NDARRAY_METHODS
from .numpy_ufuncs import loop_dtypes
from .symbolic import SymNodeVariable
from .tensors import TensorVariable


class NumpyNdarrayVariable(VariableTracker):
    """An ndarray whose values are ``tensor`` (a graph value); ``scalar``: numpy gives a numpy
    scalar here (``np.float32``), handed back to Python as one."""

    def __init__(self, tensor: TensorVariable, scalar: bool = False):
        self.tensor = tensor
        self.scalar = scalar

    @property
    def np_dtype(self) -> np.dtype:
        return numpy_dtype(self.tensor.fake.dtype)

    def python_type(self) -> type:
        return self.np_dtype.type if self.scalar else np.ndarray

    def var_getattr(self, tx, name):
        fake = self.tensor.fake
        if name in ARRAY_METADATA:
            if name == "shape":
                return (
                    self.tensor.var_getattr(tx, "shape")
                    if self.tensor._symbolic()
                    else ConstantVariable(tuple(int(s) for s in fake.shape))
                )
            if name == "size":
                return self.tensor.call_method(tx, "numel", [], {})
            if name == "ndim":
                return ConstantVariable(fake.dim())
            if name == "dtype":
                return ConstantVariable(self.np_dtype)
            return ConstantVariable(
                self.np_dtype.itemsize * (1 if name == "itemsize" else int(fake.numel()))
            )
        if name in NDARRAY_ATTRIBUTES:
            return numpy_op(tx, attribute_node(name), [self], {}, oracle=operator.attrgetter(name))
        if name in DATA_DEPENDENT_METHODS or name in IN_PLACE_METHODS or name in NDARRAY_METHODS:
            return BoundMethodVariable(self, name)  # decided when called
        if callable(getattr(np.ndarray, name, None)):
            return BoundMethodVariable(self, name)  # breaks when called, naming the method
        raise Unsupported(
            f"ndarray attribute {name!r} (capture's numpy table has no such attribute to trace)"
        )

    def call_method(self, tx, name, args, kwargs):
        if name in DATA_DEPENDENT_METHODS:
            raise Unsupported(
                f"ndarray.{name}() (its result is a Python value read from the array's data)",
                "the rest runs in Python after a graph break",
            )
        if name in IN_PLACE_METHODS:
            raise Unsupported(
                f"ndarray.{name}() changes the array in place (it may share memory with a tensor)",
                "it runs in Python between two graphs",
            )
        if name == "__len__":
            if self.tensor.fake.dim() == 0:
                raise Unsupported("len() of a 0-d array (eager raises TypeError)")
            return ConstantVariable(int(self.tensor.fake.shape[0]))
        if name == "__getitem__" and has_array(args):
            raise Unsupported(
                "indexing an ndarray with an array (the result's shape can depend on the values)"
            )
        if name not in NDARRAY_METHODS:
            raise Unsupported(
                f"ndarray.{name}() (capture's numpy table has no such method to trace)",
                "it runs in Python on real arrays between two graphs",
            )
        return numpy_op(tx, method_node(name), [self, *args], kwargs, oracle=method_oracle(name))

    def unpack(self, tx):
        if self.tensor.fake.dim() == 0:
            raise Unsupported("iterating over a 0-d array (eager raises TypeError)")
        return [
            numpy_op(tx, method_node("__getitem__"), [self, ConstantVariable(i)], {}, GETITEM)
            for i in range(int(self.tensor.fake.shape[0]))
        ]

    def truth(self, tx):
        raise Unsupported(
            "the truth value of an ndarray (read from its data)",
            "the rest runs in Python after a graph break; np.where keeps a choice in the graph",
        )

    def reconstruct(self, rec) -> str:
        """The ndarray in Python after the graph (an output, or a value live at a break)."""
        if self.source is not None:
            return source_code(self.source, rec.ns)
        memo = rec._memo
        name = memo.get(id(self))
        if name is None:
            name = memo[id(self)] = f"__v{len(memo)}"
            rec.emit(
                f"{name} = {rec.expr(self.tensor)}.numpy(force=True){'[()]' if self.scalar else ''}"
            )
        return name

    def __repr__(self) -> str:
        return f"NumpyNdarrayVariable({self.tensor.node.name}, {tuple(self.tensor.fake.shape)})"


def numpy_op(tx, target, args: list, kwargs: dict, oracle, ufunc=None) -> VariableTracker:
    """One graph node running ``target`` (an entry of capture's numpy table) on the arrays'
    tensors; its results are ndarrays again. ``oracle``: numpy's own callable, whose result on
    stand-in arrays gives the dtype the entry computes in and the dtype, shape and scalar-ness
    the node's result must have; for a ``ufunc`` the entry gets numpy's loop dtypes instead."""
    if _is_none(kwargs.get("out", ConstantVariable(0))):
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}  # out=None: numpy's default
    if "out" in kwargs:
        raise Unsupported(
            "a numpy call with out= (it writes an array in place, which may share memory "
            "with a tensor)",
            "it runs in Python between two graphs",
        )
    if _has_tensor(args) or _has_tensor(kwargs.values()):
        raise Unsupported(
            "an ndarray and a torch.Tensor in one numpy operation",
            "convert one of them (torch.from_numpy / .numpy()) first",
        )
    name = target.__name__
    if ufunc is None:
        _check_arguments(target, name, args, kwargs)
    expected, stand_ins, exact = numpy_oracle(oracle, args, kwargs)
    if ufunc is not None:
        if kwargs:
            raise Unsupported(
                f"{name} with keyword {next(iter(kwargs))}= (capture's numpy table does not "
                "model a ufunc's keywords)",
                "it runs in Python on real arrays between two graphs",
            )
        lead = tuple(torch_dtype_of(d, name) for d in loop_dtypes(ufunc, stand_ins))
    else:
        lead = _result_dtype(expected, name)
    graph_args = [ConstantVariable(lead), *(_tensor_of(a) for a in args)]
    graph_kwargs = {k: _tensor_of(v) for k, v in kwargs.items()}
    result = tx.out.call_tensor_op(tx, "call_function", target, graph_args, graph_kwargs)
    return _as_arrays(result, expected, name, exact)


def _check_arguments(target, name: str, args: list, kwargs: dict) -> None:
    """The call fits the entry's signature (numpy's, after the leading result dtype), and gives
    no out array by position (numpy would write into it)."""
    try:
        bound = inspect.signature(target.entry).bind(None, *args, **kwargs)
    except TypeError as e:
        raise Unsupported(
            f"{name} with these arguments (capture's numpy table does not take them: {e})",
            "it runs in Python on real arrays between two graphs",
        ) from e
    if not _is_none(bound.arguments.get("out_", ConstantVariable(None))):
        raise Unsupported(
            f"{name} with an out array (it writes an array in place, which may share memory "
            "with a tensor)",
            "it runs in Python between two graphs",
        )


def _is_none(v) -> bool:
    return isinstance(v, ConstantVariable) and v.value is None


def _result_dtype(expected, name: str):
    """The torch dtype of numpy's result (a tuple of them for a tuple; None: no array)."""
    if isinstance(expected, (np.ndarray, np.generic)):
        return torch_dtype_of(expected.dtype, name)
    if isinstance(expected, (tuple, list)):
        return tuple(_result_dtype(e, name) for e in expected)
    return None


def _as_arrays(result, expected, name: str, exact: bool = True):
    """``result`` as arrays, when it has numpy's dtype, shape and scalar-ness; ``exact`` False:
    numpy ran on tiny stand-ins (``numpy_oracle``), so only the rank is numpy's to check."""
    if isinstance(result, TensorVariable):
        if not isinstance(expected, (np.ndarray, np.generic)):
            raise Unsupported(f"{name}: numpy gives a {type(expected).__name__} here, not an array")
        shape = _hinted(result.fake.shape)  # numpy ran on the hints; == on a size would guard
        if result.fake.dtype != torch_dtype(expected.dtype) or (
            shape != np.shape(expected) if exact else len(shape) != np.ndim(expected)
        ):
            raise Unsupported(
                f"{name}: capture's numpy table gives {result.fake.dtype} "
                f"{tuple(result.fake.shape)} where numpy gives {expected.dtype} "
                f"{np.shape(expected)}",
                "it runs in Python on real arrays between two graphs",
            )
        return NumpyNdarrayVariable(result, scalar=isinstance(expected, np.generic))
    if (
        isinstance(result, (TupleVariable, ListVariable))
        and isinstance(expected, (tuple, list))
        and len(result.items) == len(expected)
    ):
        items = [_as_arrays(r, e, name, exact) for r, e in zip(result.items, expected)]
        return TupleVariable(items) if isinstance(result, TupleVariable) else ListVariable(items)
    raise Unsupported(
        f"{name}: a result capture cannot check against numpy's ({type(expected).__name__})"
    )


#: arrays of up to this many elements are stood in for at their real shapes in ``numpy_oracle``
#: (numpy's result shape is then checked exactly); a call on a larger one runs on tiny arrays
_REAL_SHAPES_UP_TO = 1 << 16


def numpy_oracle(fn, args: list, kwargs: dict):
    """``fn`` run by numpy on arrays of ones of the same dtypes (broadcast views: no memory per
    element), for the dtype, rank and scalar-ness numpy's result has: ``(result, positional
    stand-ins, exact)``. Small arrays keep their real shapes, so the result's shape is numpy's
    too (``exact``). A call on a larger array runs first on tiny stand-ins of the same dtype and
    rank, each dim of size 0 or 1 kept and any larger one made 2: numpy's result dtype does not
    depend on sizes (NEP 50), size-1 dims broadcast and squeeze as the real ones do, so dtype,
    rank and scalar-ness are numpy's while the capture time stays flat in the array's size; the
    shape is then the fake tensors' (entries written in torch operations). A call the tiny
    arrays do not fit (``reshape(3, 500)``, ``a[7]``) runs on the real shapes after all."""
    large = _largest_array(args, kwargs.values()) > _REAL_SHAPES_UP_TO
    for tiny in (True, False) if large else (False,):
        try:
            stand_ins = [_stand_in(a, tiny) for a in args]
            real_kwargs = {k: _stand_in(v, tiny) for k, v in kwargs.items()}
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn(*stand_ins, **real_kwargs), stand_ins, not tiny
        except Unsupported:
            raise
        except Exception as e:
            if tiny:
                continue
            raise Unsupported(
                f"numpy's {getattr(fn, '__name__', fn)} on these arguments raised "
                f"{type(e).__name__}: {e}",
                "it runs in Python on real arrays between two graphs",
            ) from e


def _largest_array(*groups) -> int:
    sizes = [0]
    for group in groups:
        for v in group:
            if isinstance(v, NumpyNdarrayVariable):
                n = v.tensor.fake.numel()
                sizes.append(_size_hint(n) if isinstance(n, torch.SymInt) else int(n))
            elif isinstance(v, (TupleVariable, ListVariable)):
                sizes.append(_largest_array(v.items))
    return max(sizes)


def _hinted(shape) -> tuple[int, ...]:
    return tuple(_size_hint(s) if isinstance(s, torch.SymInt) else int(s) for s in shape)


def _size_hint(n: torch.SymInt) -> int:
    hint = n.node.hint
    return int(hint) if hint is not None else _opaque()


def _stand_in(v, tiny: bool = False):
    if isinstance(v, NumpyNdarrayVariable):
        dtype = v.np_dtype
        if v.scalar:
            return dtype.type(1)
        # a symbolic size stands in by its hint: int() of it would specialize the graph
        shape = _hinted(v.tensor.fake.shape)
        if tiny:
            shape = tuple(min(s, 2) for s in shape)
        return np.broadcast_to(np.ones((), dtype=dtype), shape)
    if isinstance(v, (TupleVariable, ListVariable)):
        items = [_stand_in(i, tiny) for i in v.items]
        return tuple(items) if isinstance(v, TupleVariable) else items
    if isinstance(v, SymNodeVariable):
        return int(v.value.node.hint) if v.value.node.hint is not None else _opaque()
    if v.is_python_constant():
        return v.as_python_constant()
    raise Unsupported(f"a {type(v).__name__} argument of a numpy call")


def _opaque():
    raise Unsupported(
        "a numpy call on a value read from a tensor (its value is not known at capture time)"
    )


def _tensor_of(v):
    if isinstance(v, NumpyNdarrayVariable):
        return v.tensor
    if isinstance(v, TupleVariable):
        return TupleVariable([_tensor_of(i) for i in v.items])
    if isinstance(v, ListVariable):
        return ListVariable([_tensor_of(i) for i in v.items])
    if (
        isinstance(v, ConstantVariable)
        and isinstance(v.value, (np.dtype, type))
        and is_numpy_dtype(v.value)
    ):
        # the entries compute in numpy's result dtype (the node's first argument), so a dtype
        # argument only needs a spelling the graph's code has
        return ConstantVariable(torch_dtype(v.value))
    if isinstance(v, ConstantVariable) and isinstance(v.value, np.generic):
        # the graph's code spells Python scalars only; numpy's scalar type (np.float64(2) *
        # float32 array is float64) is in the dtypes the oracle handed the entry
        return ConstantVariable(v.value.item())
    return v


def has_array(vs) -> bool:
    return any(
        isinstance(v, NumpyNdarrayVariable)
        or isinstance(v, (TupleVariable, ListVariable))
        and has_array(v.items)
        for v in vs
    )


def _has_tensor(vs) -> bool:
    return any(
        isinstance(v, TensorVariable)
        or isinstance(v, (TupleVariable, ListVariable))
        and _has_tensor(v.items)
        for v in vs
    )


__all__ = ["NumpyNdarrayVariable", "has_array", "numpy_op", "numpy_oracle"]
