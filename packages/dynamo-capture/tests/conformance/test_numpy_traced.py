"""numpy code on tensors' values traced into the graph (``t.numpy()``, ``np.asarray(t)``, numpy
functions, ndarray methods, attributes and operators), as TorchDynamo traces it.

Each program runs eagerly and captured on three calls with fresh random inputs: the results
must be what eager numpy gives (the same Python types: an ndarray, a numpy scalar such as
``np.float32``, a tuple; the same dtypes, numpy's float64 defaults included; values close), the
first call compiles ``graphs`` graphs and the later calls none. ``graphs=1`` with ``ops`` means
the whole program is one graph holding at least that many numpy nodes (``run_numpy_program`` of
_numpy_harness.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _conformance_harness import RecordingBackend, x34
from _numpy_harness import NumpyProgram, assert_same_numpy, run_numpy_program
from torchkiln_dynamo_capture import capture


def exp_plus_sum_over_an_axis(x):
    a = x.numpy()
    return np.exp(a) * 2 + np.sum(a, axis=0)


def where_then_clip(x):
    a = np.asarray(x)
    return np.clip(np.where(a > 0, a, 0.0), 0.1, 0.9)


def matmul_and_transpose(x):
    a = x.numpy()
    return np.matmul(a, a.T), a.T @ a


def attributes_are_metadata(x):
    a = x.numpy()
    return a.shape, a.ndim, a.dtype, a.size, a.T.shape, a.itemsize, a * a.ndim


def reductions_are_numpy_scalars(x):
    a = x.numpy()
    return np.sum(a), a.mean(), np.max(a), a.std(), a[0, 1]


def method_chain_to_float64(x):
    a = x.numpy()
    return a.reshape(-1).astype(np.float64).cumsum()


def integer_arrays_mean_in_float64(x):
    i = (x > 0).numpy().astype(np.int64)
    return i * 2, i.sum(), np.mean(i), i.sum(axis=1)


def back_to_torch(x):
    a = x.numpy()
    return torch.from_numpy(np.tanh(a)) + x, torch.as_tensor(np.square(a)).sum()


def indexing(x):
    a = x.numpy()
    return a[0], a[1:, ::2], a[:, 1], a[..., None].shape


def logical_operators(x):
    a = x.numpy()
    return np.logical_and(a > 0, a < 0.5), (a > -0.5) & (a < 1), ~(a > 0), a != 0


def unary_operators(x):
    a = x.numpy()
    return -a, abs(a), np.sqrt(np.abs(a)), +a


def joins_and_maximum(x):
    a = x.numpy()
    return np.concatenate([a, a * 2], axis=0), np.stack((a, a)), np.maximum(a, 0)


def norm_of_rows(x):
    return np.linalg.norm(np.asarray(x), axis=1)


def numpy_scalar_constant(x):
    a = x.numpy()
    return a * np.float32(2), np.float32(0.5) + a


def python_scalars_keep_the_array_dtype(x):
    a = x.numpy()
    return a * 2.5 + 1, a / 3, a**2, a // 1, a % 1.5


def int_tensor_arithmetic(x):
    k = (x * 10).long().numpy()
    return k // 3, k % 4, k * 2 - 1


# bool() reads a value out of the array: the first graph ends there, the rest is the second
def truth_of_an_array_breaks(x):
    a = x.numpy()
    ok = bool(np.all(np.isfinite(a)))
    return (x * 2 if ok else x), a.sum(axis=0)


# int / 2 is float64 in numpy (float32 in torch): the table computes in numpy's loop dtype
def int_true_divide_is_float64(x):
    y = x + 1
    i = (y > 1).numpy().astype(np.int64)
    return y, i / 2, i / i.sum()


# an ndarray and a tensor in one numpy call: not traced, runs in Python (exp | sin)
def array_and_tensor_mixed(x):
    a = x.numpy()
    e = np.exp(a)
    m = np.add(a, x)
    return e, m, x.sin()


def reductions_with_keepdims_and_argmax(x):
    a = x.numpy()
    return (
        a.max(axis=1, keepdims=True),
        np.argmax(a, axis=0),
        a.argmin(),
        np.prod(a, axis=1),
        np.var(a),
    )


def cumulative_and_sorting(x):
    a = x.numpy()
    return np.cumsum(a, axis=1), np.sort(a, axis=0), np.flip(a, 0), np.diff(a, axis=1)


def shapes_and_broadcasting(x):
    a = x.numpy()
    return (
        a.reshape(2, 6),
        np.expand_dims(a, 0).shape,
        np.transpose(a)[None] + a.T,
        np.squeeze(a[None]),
        np.tile(a, (2, 1)),
    )


def float16_and_int32(x):
    h = x.numpy().astype(np.float16)
    i = (x * 100).int().numpy()
    return h * 2, i // 7, i.astype(np.float32) / 3, (h + i).dtype


def softmax_in_numpy(x):
    a = x.numpy()
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def outer_and_einsum(x):
    a = x.numpy()
    return np.outer(a[0], a[1]), np.einsum("ij,kj->ik", a, a), np.dot(a, a.T), np.trace(a @ a.T)


# arrays made from constants are graph nodes too (fresh each call, as in eager)
def linspace_arange_with_arrays(x):
    a = x.numpy()
    return a * np.arange(4), a + np.linspace(0, 1, 4)


def loop_over_rows(x):
    a = x.numpy()
    total = np.zeros(4, dtype=np.float32)
    for row in a:
        total = total + row * 2
    return total


# numpy arrays passed in are read on every call (never folded at capture time: a.mean() was
# the first call's mean on every later call)
def array_arguments(a, x):
    y = x * 2
    return y, np.sum(a) * 2, a.mean(), a.max()


def _array_and_tensor():
    return (np.random.randn(5), torch.randn(3))


# numpy array arguments enter the graph as tensors sharing their memory (float64 stays float64)
def float64_array_arguments(a, b):
    return a @ b.T, np.tanh(a) - b, (a > b).sum(axis=0)


def _two_arrays():
    return (np.random.randn(3, 4), np.random.randn(3, 4))


# an array with negative strides cannot be shared with a tensor: it stays a plain object and
# its numpy calls run in Python (no graph)
def reversed_array_argument(a):
    return np.sum(a, axis=0), a.mean()


def _reversed_array():
    return (np.random.randn(4, 3)[::-1],)


# an array live at a graph break is handed to the continuation, where it is a graph input again
def array_across_a_break(x):
    b = np.exp(x.numpy())
    print("a break")
    return b * 2, b.sum()


PROGRAMS = [
    NumpyProgram(exp_plus_sum_over_an_axis, x34, 1, 4),
    NumpyProgram(where_then_clip, x34, 1, 3),
    NumpyProgram(matmul_and_transpose, x34, 1, 3),
    NumpyProgram(attributes_are_metadata, x34, 1, 1),
    NumpyProgram(reductions_are_numpy_scalars, x34, 1, 5),
    NumpyProgram(method_chain_to_float64, x34, 1, 3),
    NumpyProgram(integer_arrays_mean_in_float64, x34, 1, 4),
    NumpyProgram(back_to_torch, x34, 1, 2),
    NumpyProgram(indexing, x34, 1, 3),
    NumpyProgram(logical_operators, x34, 1, 6),
    NumpyProgram(unary_operators, x34, 1, 4),
    NumpyProgram(joins_and_maximum, x34, 1, 4),
    NumpyProgram(norm_of_rows, x34, 1, 1),
    NumpyProgram(numpy_scalar_constant, x34, 1, 2),
    NumpyProgram(python_scalars_keep_the_array_dtype, x34, 1, 6),
    NumpyProgram(int_tensor_arithmetic, x34, 1, 4),
    NumpyProgram(truth_of_an_array_breaks, x34, 2, 2),
    NumpyProgram(int_true_divide_is_float64, x34, 1, 4),
    NumpyProgram(array_and_tensor_mixed, x34, 2),
    NumpyProgram(reductions_with_keepdims_and_argmax, x34, 1, 5),
    NumpyProgram(cumulative_and_sorting, x34, 1, 4),
    NumpyProgram(shapes_and_broadcasting, x34, 1, 5),
    NumpyProgram(float16_and_int32, x34, 1, 5),
    NumpyProgram(softmax_in_numpy, x34, 1, 5),
    NumpyProgram(outer_and_einsum, x34, 1, 4),
    NumpyProgram(linspace_arange_with_arrays, x34, 1, 4),
    NumpyProgram(loop_over_rows, x34, 1, 5),
    NumpyProgram(array_arguments, _array_and_tensor, 1, 3),
    NumpyProgram(float64_array_arguments, _two_arrays, 1, 5),
    NumpyProgram(reversed_array_argument, _reversed_array, 0),
    NumpyProgram(array_across_a_break, x34, 2, 3),
]


@pytest.mark.parametrize("p", PROGRAMS, ids=[p.id for p in PROGRAMS])
def test_numpy_program(p: NumpyProgram):
    run_numpy_program(p)


def test_fullgraph_reports_what_is_not_traced():
    from torchkiln_dynamo_capture import Unsupported

    with pytest.raises(Unsupported, match="ndarray"):
        capture(truth_of_an_array_breaks, RecordingBackend(), fullgraph=True)(torch.randn(3, 4))
    with pytest.raises(Unsupported, match=r"numpy\.median \(not in capture's numpy table"):
        capture(lambda x: np.median(x.numpy()), RecordingBackend(), fullgraph=True)(
            torch.randn(3, 4)
        )


def test_array_of_a_tensor_that_requires_grad_raises_as_eager():
    def f(x):
        return np.exp(x.numpy())

    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError) as eager:
        f(x)
    with pytest.raises(RuntimeError) as captured:
        capture(f, RecordingBackend())(x)
    assert str(captured.value) == str(eager.value)


def test_an_array_argument_returned_is_the_callers_array():
    def f(a, x):
        return a, x * 2, a.T

    compiled = capture(f, RecordingBackend())
    a, x = np.random.randn(2, 3), torch.randn(3)
    out = compiled(a, x)
    assert out[0] is a  # as eager: the object itself, not a copy or a new view
    assert_same_numpy(out, f(a, x))


def test_numpy_random_draws_on_every_call():
    """numpy.random is never run at capture time (its first numbers were every call's)."""

    def f(x):
        return x + torch.from_numpy(np.random.rand(3)).float(), np.random.default_rng(7).random(2)

    compiled = capture(f, RecordingBackend())
    x = torch.randn(3)
    seen = []
    for seed in (0, 1, 2):
        np.random.seed(seed)
        expected = f(x)
        np.random.seed(seed)
        actual = compiled(x)
        assert_same_numpy(actual, expected, f"seed {seed}")
        seen.append(actual[0])
    assert not torch.equal(seen[0], seen[1])


def test_out_argument_runs_in_python():
    def f(x):
        a = np.exp(x.numpy())
        b = np.zeros_like(a)
        np.add(a, 1, out=b)
        return b, a

    backend = RecordingBackend()
    compiled = capture(f, backend)
    for _ in range(2):
        x = torch.randn(2, 3)
        assert_same_numpy(compiled(x), f(x))


def test_an_array_made_from_constants_is_new_on_every_call():
    """np.zeros(3) made once at capture time was one array shared by every call: a call that
    wrote into it (in Python, after a break) changed what the next call started from."""

    def f(x):
        acc = np.zeros(3)
        acc += 1  # in place: runs in Python, on this call's array
        return x + torch.from_numpy(acc), acc

    compiled = capture(f, RecordingBackend())
    x = torch.zeros(3, dtype=torch.float64)
    first, second = compiled(x), compiled(x)
    assert_same_numpy(second, f(x))
    assert first[1] is not second[1]
