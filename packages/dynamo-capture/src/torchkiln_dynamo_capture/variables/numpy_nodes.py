"""Capture's numpy table as graph node targets: numpy's callables looked up in the table
(numpy_table.py, numpy_ufuncs.py), and one named module-level function per entry, which the graph
calls (numpy_arrays.py adds the nodes); the ndarray attributes and methods that need no node
or break the graph; the dtypes between numpy and torch.
"""

from __future__ import annotations

import functools

import torch

from ..exc import Unsupported
from .base import hashable
from .numpy_table import NDARRAY_ATTRIBUTES, NDARRAY_METHODS, NUMPY_FUNCTIONS
from .numpy_ufuncs import UFUNCS, run_ufunc

try:
    import numpy as np
except ImportError:  # the optional "numpy" extra
    np = None


def numpy_callable(fn) -> bool:
    """A function of numpy (a ufunc, a Python function, or numpy 2's array-function dispatcher)."""
    if np is None:
        return False
    module = getattr(fn, "__module__", None) or ""
    return (
        isinstance(fn, np.ufunc)
        or callable(fn)
        and not isinstance(fn, type)
        and module.split(".")[0] == "numpy"
        and not module.startswith("numpy.random")
    )


def numpy_function(fn) -> object | None:
    """The table's entry for numpy's ``fn`` (None: not a numpy function the table has)."""
    if not numpy_callable(fn) or not hashable(fn):
        return None
    return NUMPY_FUNCTIONS.get(fn) or UFUNCS.get(fn)


def torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    return getattr(torch, np.dtype(dtype).name, None)


# Each target is a module-level function object with a unique name: FX writes it into the graph's
# code by that name, and code that names two different calls alike would be one cache key.


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    try:
        return np.dtype(str(dtype).removeprefix("torch."))
    except TypeError as e:
        raise Unsupported(f"an ndarray of {dtype} (numpy has no such dtype)") from e


def torch_dtype_of(dtype, name: str) -> torch.dtype:
    found = torch_dtype(dtype)
    if found is None:
        raise Unsupported(f"{name}: numpy gives {np.dtype(dtype)} here (torch has no such dtype)")
    return found


def is_numpy_dtype(value) -> bool:
    return isinstance(value, np.dtype) or isinstance(value, type) and issubclass(value, np.generic)


def _node_target(name: str, call, entry):
    def numpy_node(*args, **kwargs):
        return call(*args, **kwargs)

    numpy_node.__name__ = numpy_node.__qualname__ = name
    numpy_node.__module__ = __name__
    numpy_node.entry = entry  # the table's entry, whose signature the call must fit
    return numpy_node


@functools.cache
def function_node(fn):
    module = "numpy" if isinstance(fn, np.ufunc) else fn.__module__
    name = f"{module.replace('.', '_')}_{fn.__name__}".replace("numpy__core_", "numpy_")
    entry = NUMPY_FUNCTIONS[fn]
    return _node_target(name, entry, entry)


@functools.cache
def ufunc_node(ufunc):
    torch_fn = UFUNCS[ufunc]

    def call(loop, *operands):
        return run_ufunc(torch_fn, loop, operands)

    return _node_target(f"numpy_{ufunc.__name__}", call, call)


@functools.cache
def method_node(name: str):
    entry = NDARRAY_METHODS[name]
    return _node_target(f"ndarray_method_{name.strip('_')}", entry, entry)


@functools.cache
def method_oracle(name: str):
    def method(self, *args, **kwargs):
        return getattr(self, name)(*args, **kwargs)

    method.__name__ = f"ndarray.{name}"
    return method


@functools.cache
def attribute_node(name: str):
    entry = NDARRAY_ATTRIBUTES[name]
    return _node_target(f"ndarray_attribute_{name}", entry, entry)


GETITEM = method_oracle("__getitem__")
#: numpy functions that read an array's metadata: no node
METADATA_FUNCTIONS = {np.shape: "shape", np.ndim: "ndim", np.size: "size"} if np is not None else {}

#: answers read from the array's metadata
ARRAY_METADATA = frozenset({"shape", "ndim", "size", "dtype", "itemsize", "nbytes"})
#: methods whose result is a Python value computed from the data: the graph breaks
DATA_DEPENDENT_METHODS = frozenset(
    {
        "item",
        "tolist",
        "tobytes",
        "tostring",
        "__bool__",
        "__int__",
        "__float__",
        "__index__",
        "__complex__",
        "nonzero",
        "__array__",
        "__iter__",
    }
)
#: methods that change the array in place (it may share memory with a tensor)
IN_PLACE_METHODS = frozenset(
    {
        "fill",
        "sort",
        "resize",
        "put",
        "itemset",
        "setfield",
        "partition",
        "__setitem__",
        "__delitem__",
        "byteswap",
        "setflags",
    }
)


__all__ = [
    "ARRAY_METADATA",
    "DATA_DEPENDENT_METHODS",
    "IN_PLACE_METHODS",
    "GETITEM",
    "METADATA_FUNCTIONS",
    "attribute_node",
    "function_node",
    "is_numpy_dtype",
    "method_node",
    "method_oracle",
    "numpy_callable",
    "numpy_dtype",
    "numpy_function",
    "torch_dtype",
    "torch_dtype_of",
    "ufunc_node",
]
