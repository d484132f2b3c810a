"""``.item()``, ``.tolist()``, ``.numpy()``, numpy calls and unknown C functions.

numpy calls on arrays made from tensors (``t.numpy()``, ``np.asarray(t)``) are traced into the graph;
what reads a value out of an array (``int()``, ``bool()``, ``.tolist()``) breaks it.

A Python value read out of a tensor is guarded like any constant once a continuation carries it,
so the programs read deterministic facts (``(x > -100).sum()`` is the element count) or use the
value only where no tensor operation follows in the same piece; random floats are only returned.
"""

from __future__ import annotations

import array
import binascii
import hashlib
import heapq
import os
import pickle
import zlib

import numpy as np
from _breaks_harness import program


@program(graphs=2)
def item_of_deterministic_count(x):
    c = x.isnan().sum().item()
    return x + c


@program(graphs=1)
def item_returned_at_the_end(x):
    return (x * 2).sum().item()


@program(graphs=1)
def tolist_returned_at_the_end(x):
    return (x + 1).tolist()


@program(graphs=2)
def item_inside_print(x):
    y = x.sum()
    print(f"{(y > 1e9).item()}")
    return y * 2


@program(graphs=2)
def int_of_tensor_as_range_bound(x):
    for _ in range(int((x > -100).sum()) // 6):
        x = x + 1
    return x


@program(graphs=2)
def tolist_length_in_control_flow(x):
    y = x.abs()
    if len((y >= 0).tolist()) == 3:
        return y * 2
    return y


@program(graphs=2)
def tolist_of_ints_summed(x):
    y = x.sigmoid()
    n = sum(sum(r) for r in (y > -1).int().tolist())
    return y * n


@program(graphs=2)
def numpy_method_on_tensor_output(x):
    y = x.relu()
    n = int(np.count_nonzero(y.numpy() >= 0))
    return y * n


# numpy on a tensor's values is traced (as TorchDynamo does): the comparison and count_nonzero are
# the first graph, int() of the count breaks, x * n is the second
@program(graphs=2)
def numpy_on_input_before_any_op(x):
    n = int(np.count_nonzero(x.numpy() > -100))
    return x * n


@program(graphs=2)
def numpy_function_on_tensor(x):
    y = x.abs()
    flag = bool(np.all(np.asarray(y) >= 0))
    return y * 2 if flag else y


@program(graphs=2)
def numpy_isfinite_of_item(x):
    s = x.sum()
    ok = bool(np.isfinite(s.item()))
    return x * 2 if ok else x


@program(graphs=3)
def numpy_in_a_loop(x):
    for _ in range(3):
        x = x * 2
        ok = bool(np.all(np.isfinite(x.numpy())))
        assert ok
    return x


@program(graphs=2)
def numpy_result_printed(x):
    y = x.cos()
    print(np.asarray(y).shape, np.asarray(y).dtype)
    return y.sin()


@program(graphs=2)
def numpy_sum_of_bool_array(x):
    y = x * 3
    k = int((np.asarray(y) > -1e9).sum())
    return y + k


# zlib and binascii are in capture's list of pure C modules: a call on constant arguments is run at
# capture time (no break). Calls into other C modules (hashlib, pickle, heapq, os, array) break.
@program(graphs=1)
def pure_c_function_zlib_crc32_is_folded(x):
    y = x.tanh()
    c = zlib.crc32(b"torchkiln") % 7
    return y * c


@program(graphs=1)
def pure_c_function_binascii_hexlify_is_folded(x):
    y = x + 1
    h = binascii.hexlify(str(tuple(y.shape)).encode())
    return y * len(h)


@program(graphs=2)
def c_function_hashlib_digest(x):
    y = x.tanh()
    n = len(hashlib.sha256(b"torchkiln").hexdigest()) // 16
    return y * n


@program(graphs=2)
def c_function_pickle_dumps(x):
    y = x + 2
    n = len(pickle.dumps((1, 2), protocol=4)) % 5
    return y * n


@program(graphs=2)
def c_function_heapq_on_local_list(x):
    y = x * 2
    hq = []
    heapq.heappush(hq, 3)
    heapq.heappush(hq, 1)
    return y * hq[0], hq


@program(graphs=2)
def c_function_os_getpid(x):
    y = x.exp()
    positive = os.getpid() > 0
    return y + positive


@program(graphs=2)
def c_constructor_array_array(x):
    y = x - 1
    a = array.array("i", [1, 2, 3])
    return y * len(a)


@program(graphs=3)
def item_then_numpy_then_print(x):
    y = x * 2
    n = (y > -1e9).sum().item()
    z = y + n
    print("arr", np.full(2, n).tolist())
    return z * 2
