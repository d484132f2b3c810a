"""Capture's numpy table (variables/numpy_table.py, numpy_ufuncs.py) case by case: numpy's type
promotion where it differs from torch's, axis/keepdims/ddof, numpy's float64 defaults for arrays
made from constants, methods of numpy scalars, and calls the table lacks breaking the graph with a
reason that names them.

Each program runs eagerly (real numpy) and captured on three calls with fresh random inputs: the
results must be eager's exactly in Python type, dtype and shape, and close in value
(``run_numpy_program`` of _numpy_harness.py); ``graphs`` graphs on the first call and none
after; ``numpy_nodes``: at least that many numpy nodes in them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _conformance_harness import RecordingBackend, x34
from _numpy_harness import NumpyProgram, assert_same_numpy, run_numpy_program
from torchkiln_dynamo_capture import Unsupported, capture


def x234():
    return (torch.randn(2, 3, 4),)


# --------------------------------------------------------------------------- promotion
def int_true_divide_and_mixed_widths(x):
    i = (x * 10).long().numpy()
    j = (x * 10).int().numpy()
    f = x.numpy()
    return i / 3, np.true_divide(j, j + 100), j + f, j * 2.5, f + 2.5, j + i, f < i


def bool_arithmetic(x):
    b = x.numpy() > 0
    return b + b, b * b, b + 1, b & (x.numpy() < 1), ~b, np.logical_not(b)


def numpy_scalars_are_strong(x):
    f = x.numpy()
    return f * np.float64(2), np.float32(2) * f, f + np.int64(1), f * np.float16(3)


def unary_ufuncs_of_ints(x):
    i = (x * 10).long().numpy()
    return np.sqrt(np.abs(i)), np.floor(i), np.exp(i % 3), -i, np.sign(i), np.square(i)


def integer_operators(x):
    i = (x * 10).long().numpy()
    return i // 3, i % 4, i**2, abs(i), i @ i.T, i << 1, i >> 1


def integer_division_by_zero_is_zero(x):
    i = (x * 3).long().numpy()  # zeros among the divisors: numpy gives 0 (torch raises)
    return 7 // i, 7 % i, np.fmod(i + 5, i), i // 0


def reductions_of_ints_and_bools(x):
    i = (x * 10).int().numpy()
    b = x.numpy() > 0
    return np.mean(i), np.sum(b), np.sum(i), np.cumsum(i, axis=0), np.prod(i % 3 + 1), i.var()


def arrays_made_from_constants(x):
    f = x.numpy()
    return (
        f[0] + np.zeros(4),
        np.arange(3),
        np.arange(0.5, 3),
        np.linspace(0, 1, 5),
        np.ones((2, 3), dtype=np.float32),
        np.full(4, 7),
        np.eye(3) + f[:, :3],
        np.zeros_like(f),
        np.full_like(f, 2.5),
    )


def joins_promote(x):
    f = x.numpy()
    i = (x * 3).long().numpy()
    return np.concatenate([f, i]), np.stack((f, i), axis=1), np.vstack([f, f]), np.hstack([f, i])


def where_with_python_scalars(x):
    f = x.numpy()
    return np.where(f > 0, 1, 0), np.where(f > 0, f, 0), np.where(f > 0, f, 0.5), np.clip(f, -1, 1)


# --------------------------------------------------------------------------- axis / keepdims
def sums_over_axis_tuples(x):
    a = x.numpy()
    return (
        a.sum(axis=(0, 2), keepdims=True),
        np.mean(a, axis=-1),
        np.max(a, axis=(0, 1)),
        a.min(axis=0, keepdims=True),
        np.prod(a, axis=(0, 2)),
        np.sum(a, axis=()),
    )


def arg_and_moment_reductions(x):
    a = x.numpy()
    return (
        np.argmax(a, axis=1, keepdims=True),
        a.argmin(),
        np.std(a, axis=1, ddof=1),
        np.var(a, ddof=1),
        np.all(a > -2, axis=1),
        np.any(a > 1, axis=(0, 1), keepdims=True),
        np.count_nonzero(a > 0, axis=0),
        np.linalg.norm(a, axis=(1, 2)),
    )


def shape_functions(x):
    a = x.numpy()
    return (
        np.expand_dims(a, (0, 2)),
        np.squeeze(a[:, :1], axis=1),
        np.moveaxis(a, 0, -1),
        np.swapaxes(a, 0, 2),
        a.transpose(2, 0, 1),
        a.reshape(6, 4),
        a.ravel(),
        np.sort(a, axis=None),
        np.cumsum(a),
        np.argsort(a, axis=1, kind="stable"),
        np.diff(a, axis=0),
        np.flip(a),
    )


# --------------------------------------------------------------------------- numpy scalars
def methods_of_numpy_scalar_constants(x):
    scale = np.float64(2.5).item() + np.sqrt(2.0).round(3) + np.int64(7).bit_count()
    half = (np.float64(2.5) * 2).is_integer()
    return x * scale + half, np.float32(1.5).astype(np.float64), np.int32(5).dtype


def methods_of_traced_numpy_scalars(x):
    a = x.numpy()
    return np.sum(a).round(2), a.mean().astype(np.float64), a[0, 0].clip(-0.5, 0.5)


# --------------------------------------------------------------------------- large arrays
# arrays over 65536 elements are stood in for by tiny ones in numpy's check (dtype, rank and
# scalar-ness from numpy, the shape from the fake tensors); calls the tiny arrays do not fit
# (reshape to explicit sizes, an index past 1) are checked on the real shapes
def x300x400():
    return (torch.randn(300, 400, dtype=torch.float64),)  # float32 sums of 300 differ in order


def large_arrays(x):
    a = x.numpy()
    i = (x * 10).long().numpy()
    return (
        np.exp(a) / 2 + np.sum(a, axis=0),
        i / 3,
        a.reshape(400, 300)[7],
        a[5, 9],
        np.squeeze(a[:1]),
        np.mean(i, axis=1, keepdims=True),
        np.concatenate([a, i], axis=1).shape,
        a.T @ a[:, :3],
    )


PROGRAMS = [
    NumpyProgram(int_true_divide_and_mixed_widths, x34, 1, 7),
    NumpyProgram(bool_arithmetic, x34, 1, 6),
    NumpyProgram(numpy_scalars_are_strong, x34, 1, 4),
    NumpyProgram(unary_ufuncs_of_ints, x34, 1, 6),
    NumpyProgram(integer_operators, x34, 1, 7),
    NumpyProgram(integer_division_by_zero_is_zero, x34, 1, 4),
    NumpyProgram(reductions_of_ints_and_bools, x34, 1, 6),
    NumpyProgram(arrays_made_from_constants, x34, 1, 9),
    NumpyProgram(joins_promote, x34, 1, 4),
    NumpyProgram(where_with_python_scalars, x34, 1, 4),
    NumpyProgram(sums_over_axis_tuples, x234, 1, 6),
    NumpyProgram(arg_and_moment_reductions, x234, 1, 8),
    NumpyProgram(shape_functions, x234, 1, 12),
    NumpyProgram(methods_of_numpy_scalar_constants, x34, 1),
    NumpyProgram(methods_of_traced_numpy_scalars, x34, 1, 3),
    NumpyProgram(large_arrays, x300x400, 1, 10),
]


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("p", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_numpy_table_program(p: NumpyProgram):
    run_numpy_program(p)


# --------------------------------------------------------------------------- what breaks
def median(x):
    return np.median(x.numpy(), axis=0)


def default_argsort(x):
    return np.argsort(x.numpy())


def ufunc_with_a_keyword(x):
    return np.add(x.numpy(), 1, dtype=np.float64)


def negative_step_slice(x):
    return x.numpy()[::-1]


@pytest.mark.parametrize(
    "fn, reason",
    [
        (median, r"numpy\.median \(not in capture's numpy table"),
        (default_argsort, r"np\.argsort without kind='stable'"),
        (ufunc_with_a_keyword, r"numpy_add with keyword dtype="),
        (negative_step_slice, r"a slice with a negative step"),
    ],
    ids=lambda v: getattr(v, "__name__", "reason"),
)
def test_a_call_the_table_lacks_breaks_with_its_reason(fn, reason):
    with pytest.raises(Unsupported, match=reason):
        capture(fn, RecordingBackend(), fullgraph=True)(torch.randn(3, 4))
    # without fullgraph it runs in Python, with eager's result
    compiled = capture(fn, RecordingBackend())
    for _ in range(2):
        x = torch.randn(3, 4)
        assert_same_numpy(compiled(x), fn(x.clone()))


def test_a_result_numpy_disagrees_with_breaks_the_graph(monkeypatch):
    """The oracle stays the judge: an entry whose result has another dtype than numpy's (here a
    deliberately wrong one) breaks the graph with both dtypes named, never a different array."""
    from torchkiln_dynamo_capture.variables import numpy_nodes, numpy_table

    def wrong_conj(out, a):
        return a.to(torch.float64)

    monkeypatch.setitem(numpy_table.NDARRAY_METHODS, "conj", wrong_conj)
    numpy_nodes.method_node.cache_clear()
    try:

        def f(x):
            return x.numpy().conj()

        with pytest.raises(Unsupported, match="gives torch.float64 .* where numpy gives float32"):
            capture(f, RecordingBackend(), fullgraph=True)(torch.randn(3, 4))
        x = torch.randn(3, 4)
        assert_same_numpy(capture(f, RecordingBackend())(x), f(x.clone()))
    finally:
        numpy_nodes.method_node.cache_clear()


def sizes_kept_symbolic(x):
    a = x.numpy()
    n = a.shape[0]
    return (
        a * n,
        np.sum(a, axis=0) / n,
        a.reshape(-1, 2),
        np.zeros(n) + a[:, 0],
        np.arange(n) * 2,
        np.exp(a),
    )


def test_dynamic_sizes_are_not_specialized_by_numpy_calls():
    """numpy's check runs on the sizes' hints and compares shapes by them: no guard on a size,
    so one graph serves every length (int() of a size, or == on it, would specialize)."""
    backend = RecordingBackend()
    compiled = capture(sizes_kept_symbolic, backend, dynamic=True)
    for n in (4, 6, 8):
        x = torch.randn(n, 4)
        assert_same_numpy(compiled(x), sizes_kept_symbolic(x.clone()), f"n={n}")
    assert len(backend.graphs) == 1


def test_out_none_is_numpys_default_and_a_positional_out_array_breaks():
    def f(x):
        a = x.numpy()
        return np.sum(a, axis=0, out=None), np.exp(a, out=None)

    x = torch.randn(3, 4)
    assert_same_numpy(capture(f, RecordingBackend(), fullgraph=True)(x), f(x.clone()))

    def g(x):
        a = x.numpy()
        into = np.zeros(4, dtype=np.float32)
        np.sum(a, 0, None, into)  # out given by position: numpy writes into it
        return into

    with pytest.raises(Unsupported, match="with an out array"):
        capture(g, RecordingBackend(), fullgraph=True)(x)
    assert_same_numpy(capture(g, RecordingBackend())(x), g(x.clone()))


def _positional(fn) -> list[str] | None:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a C function without a text signature
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None  # np.arange(start_or_stop, ...), np.einsum(*operands): no fixed positions
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return ["out_" if p.name == "out" else p.name for p in params if p.kind in kinds]


def test_entries_take_numpys_positional_arguments_in_numpys_order():
    """An entry binds the call's arguments by numpy's positions (after its leading result dtype;
    numpy's ``out`` is ``out_``): np.sum(a, 0, None, into) must reach ``out_``, not ``keepdims``."""
    from torchkiln_dynamo_capture.variables.numpy_table import NDARRAY_METHODS, NUMPY_FUNCTIONS

    checked = 0
    for fn, entry in NUMPY_FUNCTIONS.items():
        theirs, ours = _positional(fn), _positional(entry)
        if theirs is not None and ours is not None:
            assert ours[1 : 1 + len(theirs)] == theirs, (fn, theirs, ours)
            checked += 1
    for name, entry in NDARRAY_METHODS.items():
        theirs, ours = _positional(getattr(np.ndarray, name)), _positional(entry)
        if theirs is not None and ours is not None and "out_" in theirs:
            # a method's names may differ (a.clip(min, max) is np.clip(a, a_min, a_max)); the out
            # array's position may not
            assert theirs.index("out_") == ours[1:].index("out_"), (name, theirs, ours)
            checked += 1
    assert checked > 60, checked
