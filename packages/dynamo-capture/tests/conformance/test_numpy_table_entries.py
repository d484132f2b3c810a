"""One call per entry of capture's numpy table (numpy_table.py, numpy_ufuncs.py), captured with
``fullgraph=True`` (so traced, never run in Python) and compared with eager numpy on two fresh
random inputs: Python type, dtype and shape exactly, values close. The variants are where numpy's
arguments or semantics differ from torch's: ``ord`` of linalg.norm, ``dtype=`` of a reduction,
bools and float16, ``endpoint=False``, ``kind='stable'``, NaN's sign, integer and bool matmul.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from _conformance_harness import RecordingBackend
from _numpy_harness import assert_same_numpy
from torchkiln_dynamo_capture import capture

# fmt: off
ENTRIES = {
 "norm_ord1": lambda a: np.linalg.norm(a, ord=1),
 "norm_vec_inf": lambda a: np.linalg.norm(a, ord=np.inf, axis=1),
 "norm_fro": lambda a: np.linalg.norm(a, "fro"),
 "norm_nuc": lambda a: np.linalg.norm(a, "nuc"),
 "norm_1d": lambda a: np.linalg.norm(a[0], 3),
 "norm_keep": lambda a: np.linalg.norm(a, keepdims=True),
 "bool_max": lambda a: (a > 0).max(axis=0),
 "bool_argmax": lambda a: np.argmax(a > 0, axis=1),
 "f16_sum": lambda a: a.astype(np.float16).sum(axis=1),
 "f16_mean": lambda a: np.mean(a.astype(np.float16)),
 "mean_dtype": lambda a: np.mean(a, dtype=np.float64),
 "sum_dtype": lambda a: a.sum(axis=0, dtype=np.int32),
 "clip_kw": lambda a: a.clip(min=0),
 "clip_arr": lambda a: np.clip(a, a[0], 1.0),
 "round2": lambda a: a.round(2),
 "repeat": lambda a: a.repeat(2, axis=0),
 "repeat_flat": lambda a: np.repeat(a, 3),
 "roll": lambda a: np.roll(a, 2),
 "roll_ax": lambda a: np.roll(a, 1, axis=1),
 "tile": lambda a: np.tile(a, 2),
 "diag": lambda a: a.diagonal(),
 "trace_int": lambda a: (a * 10).astype(np.int32).trace(),
 "cumprod": lambda a: a.cumprod(axis=1),
 "argsort_stable": lambda a: a.argsort(kind="stable"),
 "arange_f32": lambda a: np.arange(0, 2, 0.25, dtype=np.float32) + a[0, 0],
 "arange_step": lambda a: np.arange(1, 10, 3),
 "linspace_noend": lambda a: np.linspace(0, 1, 4, endpoint=False) + a[0],
 "linspace_int": lambda a: np.linspace(-3, 3, 7, dtype=np.int64),
 "full_arr": lambda a: np.full((2, 3, 4), a[0]),
 "ones_like_dt": lambda a: np.ones_like(a, dtype=np.int32),
 "eye_m": lambda a: np.eye(3, 4),
 "array_copy": lambda a: np.array(a),
 "array_dtype": lambda a: np.array(a, dtype=np.float64),
 "asarray_dtype": lambda a: np.asarray(a, dtype=np.int64),
 "copy": lambda a: np.copy(a),
 "dot_vec": lambda a: np.dot(a[0], a[1]),
 "dot_mat_vec": lambda a: a.dot(a[0]),
 "dot_scalar": lambda a: np.dot(a, 2.0),
 "matmul_bool": lambda a: (a > 0) @ (a > 0).T,
 "einsum_trace": lambda a: np.einsum("ii", a[:, :3]),
 "vstack1d": lambda a: np.vstack([a[0], a[1]]),
 "hstack1d": lambda a: np.hstack([a[0], a[1]]),
 "column_stack": lambda a: np.column_stack([a[0], a[1]]),
 "concat_none": lambda a: np.concatenate([a, a], axis=None),
 "stack_neg": lambda a: np.stack([a, a], axis=-1),
 "sign_nan": lambda a: np.sign(np.log(a)),  # NaN where a < 0
 "power_int": lambda a: ((a * 3).astype(np.int64)) ** 2,
 "float_power": lambda a: np.float_power(a, 2),
 "hypot": lambda a: np.hypot(a, 1),
 "arctan2": lambda a: np.arctan2(a, a[::1, ::1] + 1),
 "logaddexp": lambda a: np.logaddexp(a, 0.5),
 "rint": lambda a: np.rint(a * 3),
 "trunc_int": lambda a: np.trunc((a * 5).astype(np.int32)),
 "fmax": lambda a: np.fmax(a, 0),
 "bitwise": lambda a: ((a * 10).astype(np.int32) & 3) | 8,
 "invert_int": lambda a: ~(a * 10).astype(np.int16),
 "neg_uint": lambda a: (a > 0).astype(np.uint8) + 250,
 "cmp_scalar_int": lambda a: (a * 10).astype(np.int8) < 3.5,
 "eq": lambda a: a == a[0],
 "getitem_list": lambda a: a[[0, 2]],
 "getitem_ellipsis": lambda a: a[..., 1],
 "getitem_none": lambda a: a[None, :, None].shape,
 "T_1d": lambda a: a[0].T,
 "mT": lambda a: a.mT,
 "real_imag": lambda a: (a.real, a.imag),
 "squeeze_method": lambda a: a[:, :1].squeeze(),
 "transpose_tuple": lambda a: a.transpose((1, 0)),
 "reshape_tuple": lambda a: a.reshape((4, 3)),
 "flatten": lambda a: a.flatten(),
 "any_all": lambda a: (np.any(a > 1), a.all()),
 "count_nonzero_all": lambda a: np.count_nonzero(a > 0),
 "var_ints": lambda a: np.var((a * 10).astype(np.int64), axis=0, ddof=1),
 "std_keep": lambda a: a.std(axis=1, keepdims=True),
 "max_scalar": lambda a: a.max(),
 "mean_bool": lambda a: (a > 0).mean(),
 "sum_bool_axis": lambda a: (a > 0).sum(axis=1),
 "prod_bool": lambda a: np.prod(a > -5),
 "cumsum_bool": lambda a: np.cumsum(a > 0),
 "diff_n2": lambda a: np.diff(a, n=2),
 "flip_ax": lambda a: np.flip(a, axis=(0, 1)),
 "sort_desc": lambda a: np.sort(a)[:, ::1],
 "where_ints": lambda a: np.where(a > 0, (a * 10).astype(np.int32), np.int64(5)),
 "zeros_tuple_dt": lambda a: np.zeros((2, 2), dtype=np.bool_),
 "full_int_float": lambda a: np.full(3, 2.5, dtype=np.int64),
}
# fmt: on


@pytest.mark.parametrize("name", list(ENTRIES))
def test_numpy_table_entry(name):
    entry = ENTRIES[name]

    def f(x):
        return entry(x.numpy())

    compiled = capture(f, RecordingBackend(), fullgraph=True)
    for call in ("first call", "second call"):
        x = torch.randn(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's own notes (0/0 in np.sign's input)
            expected = f(x.clone())
            assert_same_numpy(compiled(x), expected, f"{name}, {call}")
