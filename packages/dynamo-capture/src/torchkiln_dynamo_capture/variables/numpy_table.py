"""numpy's functions and ndarray methods written in torch operations: the table capture traces
numpy code with (numpy_ufuncs.py holds the ufuncs and operators, numpy_nodes.py makes each entry
a graph node target, numpy_arrays.py adds the nodes).

Every entry takes numpy's own arguments, with the arrays as tensors, after one leading argument
``out``: the torch dtype numpy's result has (numpy_arrays.py learns it by running real numpy on
stand-in arrays of the same dtypes: ``_numpy_oracle``). numpy's type promotion is therefore never
re-derived here: an entry computes in ``out`` (``np.mean`` of int64 sums in float64, ``np.sum`` of
bool counts in int64, ``np.concatenate`` of float32 and int64 is float64), and where numpy's
names differ from torch's (``axis``/``keepdims``, ``ddof``, ``axis=None`` flattening) the entry
says so. An argument an entry does not model (``where=``, ``order='F'``, ``initial=``) breaks the
graph with its name, as does every numpy call missing from the table.
"""

from __future__ import annotations

import torch

from ..exc import Unsupported

try:
    import numpy as np
except ImportError:  # the optional "numpy" extra: without it no ndarray is ever made
    np = None

_HINT = "it runs in Python on real arrays between two graphs"


def not_modelled(what: str):
    raise Unsupported(f"{what} (capture's numpy table does not model it)", _HINT)


def _default(name: str, value, default=None):
    """An argument accepted for numpy's signature but only with its default value."""
    if value is not default and value != default:
        not_modelled(f"the argument {name}={value!r}")


def as_tensor(x, dtype: torch.dtype) -> torch.Tensor:
    """An operand in ``dtype``: a tensor cast, a Python scalar made a 0-d tensor (numpy casts a
    Python scalar to the operation's dtype, NEP 50), a list of them made an array."""
    if isinstance(x, torch.Tensor):
        return x if x.dtype == dtype else x.to(dtype)
    if isinstance(x, (bool, int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return torch.full((), x, dtype=dtype)
    if isinstance(x, (list, tuple)):
        if any(isinstance(i, torch.Tensor) for i in x):
            return torch.stack([as_tensor(i, dtype) for i in x])
        return torch.tensor(x, dtype=dtype)
    not_modelled(f"a {type(x).__name__} operand")


def _dims(t: torch.Tensor, axis) -> tuple:
    """numpy's ``axis`` (None: every axis; an int; a tuple) as torch's dims."""
    if axis is None:
        return tuple(range(t.dim()))
    return (axis,) if isinstance(axis, int) else tuple(axis)


def _float_compute(t: torch.Tensor, out: torch.dtype) -> torch.Tensor:
    """Where numpy averages: a float or complex array in its own dtype, any other in ``out``."""
    return t if t.is_floating_point() or t.is_complex() else t.to(out)


# --------------------------------------------------------------------------- reductions
# numpy's axis=() reduces nothing (torch's dim=() reduces everything): each entry copies then.


def np_sum(out, a, axis=None, dtype=None, out_=None, keepdims=False, initial=None, where=None):
    _default("initial", initial)
    _default("where", where)
    t = as_tensor(a, out)
    dims = _dims(t, axis)
    # torch sums any integer dtype in int64 (numpy keeps int32 where asked: dtype=np.int32)
    return torch.sum(t, dim=dims, keepdim=keepdims).to(out) if dims else t.clone()


def np_prod(out, a, axis=None, dtype=None, out_=None, keepdims=False, initial=None, where=None):
    _default("initial", initial)
    _default("where", where)
    t = as_tensor(a, out)
    for d in sorted((d % max(t.dim(), 1) for d in _dims(t, axis)), reverse=True):
        t = torch.prod(t, dim=d, keepdim=keepdims).to(out)  # one dim at a time, as torch takes
    return t if t is not a else t.clone()


def np_mean(out, a, axis=None, dtype=None, out_=None, keepdims=False, *, where=None):
    _default("where", where)
    t = as_tensor(a, out)
    dims = _dims(t, axis)  # numpy's mean of ints is a float64 mean
    return torch.mean(t, dim=dims, keepdim=keepdims) if dims else t.clone()


def _moment(fn):
    def moment(
        out,
        a,
        axis=None,
        dtype=None,
        out_=None,
        ddof=0,
        keepdims=False,
        *,
        where=None,
        mean=None,
        **kw,
    ):
        _default("where", where)
        _default("mean", mean)
        _default("correction", kw.pop("correction", None))
        if kw:
            not_modelled(f"the argument {next(iter(kw))}=")
        t, dims = _float_compute(a, out), _dims(a, axis)
        if not dims:
            return torch.zeros_like(t, dtype=out)
        return fn(t, dim=dims, correction=ddof, keepdim=keepdims).to(out)

    moment.__name__ = f"np_{fn.__name__}"
    return moment


np_var, np_std = _moment(torch.var), _moment(torch.std)


def _extreme(fn):
    def extreme(out, a, axis=None, out_=None, keepdims=False, initial=None, where=None):
        _default("initial", initial)
        _default("where", where)
        dims = _dims(a, axis)
        return fn(a, dim=dims, keepdim=keepdims).to(out) if dims else a.clone()

    return extreme


np_max, np_min = _extreme(torch.amax), _extreme(torch.amin)


def _arg_extreme(fn):
    def arg_extreme(out, a, axis=None, out_=None, *, keepdims=False):
        t = a.to(torch.uint8) if a.dtype == torch.bool else a  # torch's argmax takes no bools
        if axis is None:  # numpy's flat index
            r = fn(t.reshape(-1), dim=0)
            return r.reshape((1,) * a.dim()) if keepdims else r
        return fn(t, dim=axis, keepdim=keepdims)

    return arg_extreme


np_argmax, np_argmin = _arg_extreme(torch.argmax), _arg_extreme(torch.argmin)


def _truth(fn):
    def truth(out, a, axis=None, out_=None, keepdims=False, *, where=None):
        _default("where", where)
        t = as_tensor(a, torch.bool)
        dims = _dims(t, axis)
        return fn(t, dim=dims, keepdim=keepdims) if dims else t.clone()

    return truth


np_all, np_any = _truth(torch.all), _truth(torch.any)


def np_count_nonzero(out, a, axis=None, *, keepdims=False):
    t, dims = a != 0, _dims(a, axis)
    return (torch.sum(t, dim=dims, keepdim=keepdims) if dims else t).to(out)


def _cumulative(fn):
    def cumulative(out, a, axis=None, dtype=None, out_=None):
        t = as_tensor(a, out)
        if axis is None:  # numpy flattens first
            t, axis = t.reshape(-1), 0
        return fn(t, dim=axis).to(out)

    return cumulative


np_cumsum, np_cumprod = _cumulative(torch.cumsum), _cumulative(torch.cumprod)


def np_trace(out, a, offset=0, axis1=0, axis2=1, dtype=None, out_=None):
    return torch.diagonal(as_tensor(a, out), offset, axis1, axis2).sum(-1).to(out)


def np_linalg_norm(out, x, ord=None, axis=None, keepdims=False):
    t = _float_compute(x, out)
    if isinstance(axis, int):
        axis = (axis,)
    vector = axis is not None and len(axis) == 1 or axis is None and (t.dim() == 1 or ord is None)
    if ord in (None, "fro") and (axis is None or len(axis) == 2):
        vector, ord = True, 2  # numpy's default: the 2-norm of the flattened values
    if vector:
        return torch.linalg.vector_norm(t, 2 if ord is None else ord, axis, keepdims).to(out)
    return torch.linalg.matrix_norm(t, ord, axis if axis else (-2, -1), keepdims).to(out)


# --------------------------------------------------------------------------- elementwise


def np_clip(out, a, a_min=None, a_max=None, out_=None, *, min=None, max=None):
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    t = as_tensor(a, out)
    lo = as_tensor(lo, out) if lo is not None else None
    hi = as_tensor(hi, out) if hi is not None else None
    if lo is None and hi is None:
        return t.clone()
    if lo is None:
        return torch.minimum(t, hi)
    if hi is None:
        return torch.maximum(t, lo)
    return torch.minimum(torch.maximum(t, lo), hi)  # numpy's order: a bound above hi gives hi


def np_where(out, condition, x=None, y=None):
    if x is None or y is None:
        not_modelled("np.where(condition) (its shape is read from the values: np.nonzero)")
    return torch.where(as_tensor(condition, torch.bool), as_tensor(x, out), as_tensor(y, out))


def np_round(out, a, decimals=0, out_=None):
    t = as_tensor(a, out)
    if t.is_floating_point():
        return torch.round(t, decimals=decimals)  # half to even, as numpy
    if t.is_complex() or decimals < 0:
        not_modelled(f"np.round of {t.dtype} to {decimals} decimals")
    return t.clone()


# --------------------------------------------------------------------------- shapes


def np_reshape(out, a, shape=None, order="C", *, newshape=None, copy=None):
    _default("order", order, "C")
    return a.reshape(shape if shape is not None else newshape)


def method_reshape(out, a, *shape, order="C", copy=None):
    _default("order", order, "C")
    return a.reshape(shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)


def np_transpose(out, a, axes=None):
    return a.permute(tuple(reversed(range(a.dim()))) if axes is None else tuple(axes))


def method_transpose(out, a, *axes):
    if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)):
        axes = axes[0]
    return np_transpose(out, a, axes or None)


def np_ravel(out, a, order="C"):
    _default("order", order, "C")
    return a.reshape(-1)


def np_squeeze(out, a, axis=None):
    return torch.squeeze(a) if axis is None else torch.squeeze(a, _dims(a, axis))


def np_expand_dims(out, a, axis):
    axes = _dims(a, axis)
    rank = a.dim() + len(axes)
    for d in sorted(d % rank for d in axes):
        a = a.unsqueeze(d)
    return a


def np_swapaxes(out, a, axis1, axis2):
    return torch.swapaxes(a, axis1, axis2)


def np_moveaxis(out, a, source, destination):
    return torch.movedim(a, source, destination)


def np_flip(out, m, axis=None):
    return torch.flip(m, _dims(m, axis))


def np_roll(out, a, shift, axis=None):
    return torch.roll(a, shift, axis)


def np_tile(out, A, reps):
    return torch.tile(A, tuple(reps) if isinstance(reps, (tuple, list)) else (reps,))


def np_repeat(out, a, repeats, axis=None):
    if not isinstance(repeats, int):
        not_modelled("np.repeat with per-element repeats")
    if axis is None:
        a, axis = a.reshape(-1), 0
    return torch.repeat_interleave(a, repeats, dim=axis)


def np_diagonal(out, a, offset=0, axis1=0, axis2=1):
    return torch.diagonal(a, offset, axis1, axis2)


def np_sort(out, a, axis=-1, kind=None, order=None, *, stable=None):
    _default("order", order)
    if axis is None:
        a, axis = a.reshape(-1), 0
    return torch.sort(a, dim=axis, stable=True).values  # equal values look alike


def np_argsort(out, a, axis=-1, kind=None, order=None, *, stable=None):
    _default("order", order)
    if not (stable or kind in ("stable", "mergesort")):
        not_modelled(
            "np.argsort without kind='stable' (numpy's default sort orders equal items its own way)"
        )
    if axis is None:
        a, axis = a.reshape(-1), 0
    return torch.argsort(a, dim=axis, stable=True)


def np_diff(out, a, n=1, axis=-1, prepend=None, append=None):
    _default("prepend", prepend)
    _default("append", append)
    return torch.diff(a, n, axis)


def _joined(fn, flat_axis: bool):
    def join(out, arrays, axis=0, out_=None, *, dtype=None, casting="same_kind"):
        ts = [as_tensor(x, out) for x in arrays]
        if flat_axis and axis is None:  # numpy flattens each first
            ts, axis = [t.reshape(-1) for t in ts], 0
        return fn(ts, dim=axis)

    return join


np_concatenate, np_stack = _joined(torch.cat, True), _joined(torch.stack, False)


def _stacked(fn):
    def stacked(out, tup, *, dtype=None, casting="same_kind"):
        return fn([as_tensor(x, out) for x in tup])

    return stacked


np_vstack, np_hstack = _stacked(torch.vstack), _stacked(torch.hstack)
np_column_stack = _stacked(torch.column_stack)


# --------------------------------------------------------------------------- linear algebra


def matmul(x, y, out: torch.dtype) -> torch.Tensor:
    x, y = as_tensor(x, out), as_tensor(y, out)
    if out == torch.bool:  # numpy's bool matmul: any of the ands (torch has no bool matmul)
        return torch.matmul(x.to(torch.int64), y.to(torch.int64)) != 0
    return torch.matmul(x, y)


def np_dot(out, a, b, out_=None):
    a, b = as_tensor(a, out), as_tensor(b, out)
    if a.dim() == 0 or b.dim() == 0:
        return torch.mul(a, b)
    if a.dim() > 2 or b.dim() > 2:
        not_modelled("np.dot of arrays of more than 2 dimensions (not a matmul)")
    return matmul(a, b, out)


def np_outer(out, a, b, out_=None):
    return torch.outer(as_tensor(a, out).reshape(-1), as_tensor(b, out).reshape(-1))


def np_einsum(out, subscripts, *operands, out_=None, dtype=None, order="K", casting="safe",
              optimize=False):  # fmt: skip
    if not isinstance(subscripts, str):
        not_modelled("np.einsum in its operand-list form")
    return torch.einsum(subscripts, *[as_tensor(o, out) for o in operands])


# --------------------------------------------------------------------------- making arrays
# numpy's result dtype (``out``) already holds the float64 default of np.zeros, np.arange(0.5)...


def np_zeros(out, shape, dtype=None, order="C", *, device=None, like=None):
    return torch.zeros(shape, dtype=out)


def np_ones(out, shape, dtype=None, order="C", *, device=None, like=None):
    return torch.ones(shape, dtype=out)


def np_full(out, shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    if isinstance(fill_value, torch.Tensor):
        return torch.broadcast_to(fill_value.to(out), shape).clone()
    return torch.full(
        shape if isinstance(shape, (tuple, list)) else (shape,), fill_value, dtype=out
    )


def np_zeros_like(out, a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return np_full(out, tuple(a.shape) if shape is None else shape, 0)


def np_ones_like(out, a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return np_full(out, tuple(a.shape) if shape is None else shape, 1)


def np_full_like(out, a, fill_value, dtype=None, order="K", subok=True, shape=None, *,
                 device=None):  # fmt: skip
    return np_full(out, tuple(a.shape) if shape is None else shape, fill_value)


def np_arange(out, *bounds, dtype=None, device=None, like=None, **named):
    if len(bounds) == 4:  # np.arange(start, stop, step, dtype)
        bounds = bounds[:3]
    if named:
        bounds = (named.get("start", bounds[0] if bounds else 0), named.get("stop"),
                  named.get("step", 1))  # fmt: skip
        if bounds[1] is None:
            bounds = (0, bounds[0], bounds[2])
    return torch.arange(*bounds, dtype=out)


def np_linspace(out, start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0,
                *, device=None):  # fmt: skip
    _default("retstep", retstep, False)
    _default("axis", axis, 0)
    if any(isinstance(v, torch.Tensor) for v in (start, stop)):
        not_modelled("np.linspace between arrays")
    work = torch.float64 if not (out.is_floating_point or out.is_complex) else out
    values = torch.linspace(start, stop, num + (not endpoint), dtype=work)[:num]
    if not (out.is_floating_point or out.is_complex):
        values = torch.floor(values)  # numpy 2 rounds an integer linspace down
    return values.to(out)


def np_eye(out, N, M=None, k=0, dtype=None, order="C", *, device=None, like=None):
    _default("k", k, 0)
    return torch.eye(N, N if M is None else M, dtype=out)


def np_identity(out, n, dtype=None, *, like=None):
    return torch.eye(n, dtype=out)


def np_array(out, object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, like=None):
    _default("ndmin", ndmin, 0)
    t = as_tensor(object, out)
    return t.clone() if t is object else t


def np_asarray(out, a, dtype=None, order=None, *, device=None, copy=None, like=None):
    return as_tensor(a, out)


def np_copy(out, a, order="K", subok=False):
    return a.clone()


def method_astype(out, a, dtype, order="K", casting="unsafe", subok=True, copy=True):
    return a.to(out) if a.dtype != out else a.clone()


def method_copy(out, a, order="C"):
    return a.clone()


def method_getitem(out, a, index):
    """``a[index]`` with ints, slices, None, ``...`` (an array index is refused before)."""
    for i in index if isinstance(index, tuple) else (index,):
        if isinstance(i, slice) and i.step is not None and i.step < 0:
            not_modelled("a slice with a negative step (torch views have no negative strides)")
    return a[index]


def attribute_T(out, a):
    return a.permute(tuple(reversed(range(a.dim()))))


def attribute_mT(out, a):
    return a.mT


def attribute_real(out, a):
    return a.real if a.is_complex() else a


def attribute_imag(out, a):
    return a.imag if a.is_complex() else torch.zeros_like(a)


def _numpy_functions() -> dict:
    """numpy's callable -> its entry."""
    if np is None:
        return {}
    entries = {
        np.sum: np_sum, np.prod: np_prod, np.mean: np_mean, np.var: np_var, np.std: np_std,
        np.max: np_max, np.amax: np_max, np.min: np_min, np.amin: np_min,
        np.argmax: np_argmax, np.argmin: np_argmin, np.all: np_all, np.any: np_any,
        np.count_nonzero: np_count_nonzero, np.cumsum: np_cumsum, np.cumprod: np_cumprod,
        np.trace: np_trace, np.linalg.norm: np_linalg_norm,
        np.clip: np_clip, np.where: np_where, np.round: np_round, np.around: np_round,
        np.reshape: np_reshape, np.transpose: np_transpose, np.ravel: np_ravel,
        np.squeeze: np_squeeze, np.expand_dims: np_expand_dims, np.swapaxes: np_swapaxes,
        np.moveaxis: np_moveaxis, np.flip: np_flip, np.roll: np_roll, np.tile: np_tile,
        np.repeat: np_repeat, np.diagonal: np_diagonal, np.sort: np_sort,
        np.argsort: np_argsort, np.diff: np_diff, np.concatenate: np_concatenate,
        np.stack: np_stack, np.vstack: np_vstack, np.hstack: np_hstack,
        np.column_stack: np_column_stack, np.dot: np_dot, np.outer: np_outer,
        np.einsum: np_einsum, np.zeros: np_zeros, np.ones: np_ones, np.full: np_full,
        np.zeros_like: np_zeros_like, np.ones_like: np_ones_like, np.full_like: np_full_like,
        np.arange: np_arange, np.linspace: np_linspace, np.eye: np_eye,
        np.identity: np_identity, np.array: np_array, np.asarray: np_asarray,
        np.asanyarray: np_asarray, np.ascontiguousarray: np_asarray, np.copy: np_copy,
    }  # fmt: skip
    return entries


#: numpy's functions this table has (``np.sum`` -> its entry); ufuncs are in numpy_ufuncs.py
NUMPY_FUNCTIONS = _numpy_functions()

#: ndarray methods (``a.sum(axis=0)``): numpy's function of the same name with the array first,
#: or a method's own entry where its signature differs (``a.reshape(2, 3)``)
NDARRAY_METHODS = {
    "sum": np_sum, "prod": np_prod, "mean": np_mean, "var": np_var, "std": np_std,
    "max": np_max, "min": np_min, "argmax": np_argmax, "argmin": np_argmin, "all": np_all,
    "any": np_any, "cumsum": np_cumsum, "cumprod": np_cumprod, "trace": np_trace,
    "clip": np_clip, "round": np_round, "squeeze": np_squeeze, "swapaxes": np_swapaxes,
    "repeat": np_repeat, "diagonal": np_diagonal, "argsort": np_argsort, "dot": np_dot,
    "ravel": np_ravel, "flatten": np_ravel, "reshape": method_reshape,
    "transpose": method_transpose, "astype": method_astype, "copy": method_copy,
    "__getitem__": method_getitem,
}  # fmt: skip

#: ndarray attributes that are arrays (``a.T``)
NDARRAY_ATTRIBUTES = {
    "T": attribute_T, "mT": attribute_mT, "real": attribute_real, "imag": attribute_imag
}  # fmt: skip

__all__ = [
    "NDARRAY_ATTRIBUTES",
    "NDARRAY_METHODS",
    "NUMPY_FUNCTIONS",
    "as_tensor",
    "matmul",
    "not_modelled",
]
