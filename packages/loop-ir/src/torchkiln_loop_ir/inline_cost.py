"""How costly a pointwise value is to inline (``count_reads_and_ops``: its loads, full loads and
other ops, the realize policy's measure) and whether a value read by several consumers is cheaper
recomputed than stored (``recompute_is_cheaper``).

Realized, a value of ``users`` consumers costs one write and ``users`` reads of its own dtype per
element. Inlined, each consumer reads the value's inputs instead and redoes its ops. Memory-bound
kernels (every pointwise and most reductions on a GPU) pay for the bytes, not the ops: an H200
does about 14 float32 ops per byte it loads, so a few dozen ops per element hide behind the loads.

The case this is for: the ReLU-masked gradient of a conv-BN-ReLU block under bfloat16 autocast,
``where(relu(bn(conv)) <= 0, 0, grad).float()``. It reads two bfloat16 tensors (4 bytes per
element) and is float32 (4 bytes), and feeds both batch-norm backward sums and the input
gradient. Realized, it cost 4 (write) + 3 x 4 (reads) bytes per element where inlining costs
3 x 4, and the float32 buffer, iterated (n, c, h, w), stayed a kernel of its own next to the
per-channel reduction over (n, h, w).

Reads of small buffers broadcast over the value (per-channel mean, rstd, weight) stay in cache
and are not counted. A value of unknown input sizes, or of more ops than its device hides
behind its loads (``max_recompute_ops``), is stored.

A CPU hides few: its two cores compute T5's relative position bias (24 ops an element: bucket
arithmetic in int64, a log, a gather from a 32 x 12 table) at about 12 ns an element, where
reading it back costs well under 1 ns. Its only load is the small table, so the byte rule alone
called recomputing it free; at t5-base's full size and batch 1 it was inlined into every
layer's softmax (12 consumers, each of three passes) and its twelve softmax kernels took 110 ms
each (session 33).
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
import torch

from .handlers import DefaultHandler
from .indexing import index_symbol
from .ir import Buffer, Pointwise, product
from .ops import ALL_OPS, set_ops_handler

#: more ops per element than this are recomputed only where memory is the bottleneck for sure;
#: the lowering realizes them (the ops of every inlined producer are counted, so nesting is bounded)
MAX_RECOMPUTE_OPS = 32

#: the same on a CPU, whose ops do not hide behind its loads (the module docstring)
MAX_RECOMPUTE_OPS_CPU = 16


def max_recompute_ops(device: torch.device | None) -> int:
    """The most ops an element that a value read by several consumers may have and still be
    recomputed in each of them on ``device`` (``LoopIROptions.recompute_max_ops`` overrides
    it)."""
    return (
        MAX_RECOMPUTE_OPS_CPU if device is not None and device.type == "cpu" else MAX_RECOMPUTE_OPS
    )


#: a read of a buffer this many times smaller than the value is a broadcast (per channel, per
#: row): it is served from cache, and costs nothing per element of the value
BROADCAST_RATIO = 16


class _LoadNames(DefaultHandler):
    """An ops handler recording which buffers a body loads."""

    default_ops = ALL_OPS

    def __init__(self) -> None:
        self.names: list[str] = []

    def load(self, name, index):
        if name not in self.names:
            self.names.append(name)

    def indirect_indexing(self, value, size, check=True):
        return sympy.Symbol("i_tmp", integer=True, nonnegative=True)

    def masked(self, mask, body, other):
        return body()

    def default(self, name, args, kwargs):
        return None


def _read_bytes_per_element(
    value: Pointwise, buffer_of: Callable[[str], Buffer | None]
) -> int | None:
    """Bytes the value's body loads per element, broadcast reads left out; None when unknown."""
    handler = _LoadNames()  # type: ignore[abstract]
    with set_ops_handler(handler):
        value.inner_fn([index_symbol("x", i) for i in range(len(value.ranges))])
    numel = product(value.ranges)
    total = 0
    for name in handler.names:
        buf = buffer_of(name)
        if buf is None:
            return None
        size = product(buf.get_size())
        if size.is_Integer and numel.is_Integer and int(size) * BROADCAST_RATIO <= int(numel):
            continue
        total += buf.get_dtype().itemsize
    return total


def recompute_is_cheaper(
    value: Pointwise,
    users: int,
    ops: int,
    buffer_of: Callable[[str], Buffer | None],
    max_ops: int,
) -> bool:
    """Whether inlining ``value`` into its ``users`` consumers moves no more bytes than
    realizing it, and its ``ops`` are at most the ``max_ops`` its device hides behind them
    (``max_recompute_ops``; see the module docstring)."""
    if ops > max_ops:
        return False
    read = _read_bytes_per_element(value, buffer_of)
    if read is None:
        return False
    own = value.dtype.itemsize
    return users * read <= (users + 1) * own


class _Counter(DefaultHandler):
    """An ops handler counting loads and other ops, to judge whether inlining is cheap.
    ``full_loads`` counts the loads whose index varies along every dim of the value in
    ``spans`` (its index symbols of sizes other than 1); the others read a broadcast buffer (a
    row's max, a bias): a value and its few re-reads, cheap to read again.

    Each op is counted once per distinct (op, arguments), as the kernel computes it (the code
    generators name each distinct expression once), and constants not at all: a body that
    rebuilds one index expression in several places (T5's relative-position bucket reads its
    ``j - i`` four times, each as ``x * 1 + 0``) costs what its kernel will do."""

    default_ops = ALL_OPS

    def __init__(self, spans: frozenset[sympy.Symbol] = frozenset()) -> None:
        self.loads = 0
        self.full_loads = 0
        self.ops = 0
        self.spans = spans
        self._seen: set = set()
        self._indices: dict = {}

    def _first(self, key: tuple) -> bool:
        try:
            new = key not in self._seen
        except TypeError:  # an unhashable argument: counted as a new op
            return True
        if new:
            self._seen.add(key)
        return new

    def load(self, name, index):
        key = ("load", name, index)
        if self._first(key):
            self.loads += 1
            if self.spans <= sympy.sympify(index).free_symbols:
                self.full_loads += 1
        return key

    def indirect_indexing(self, value, size, check=True):
        # one symbol per distinct index value: two gathers by different indices stay apart
        try:
            symbol = self._indices.setdefault(value, f"i_tmp{len(self._indices)}")
        except TypeError:
            symbol = f"i_tmp{len(self._indices)}_{id(value)}"
        return sympy.Symbol(symbol, integer=True, nonnegative=True)

    def masked(self, mask, body, other):
        self.ops += 1
        return body()

    def default(self, name, args, kwargs):
        key = (name, args, tuple(sorted(kwargs.items())) if kwargs else ())
        if name != "constant" and self._first(key):
            self.ops += 1
        return key


def count_reads_and_ops(pw: Pointwise) -> tuple[int, int, int]:
    """(loads, ops, full loads: those not of a broadcast buffer, see ``_Counter``)."""
    from .indexing import index_symbol
    from .ops import set_ops_handler

    xs = [index_symbol("x", i) for i in range(len(pw.ranges))]
    spans = frozenset(x for x, r in zip(xs, pw.ranges) if sympy.sympify(r) != 1)
    # abstract to mypy only: the ops are set on DefaultHandler at import (handlers.py)
    counter = _Counter(spans)  # type: ignore[abstract]
    with set_ops_handler(counter):
        pw.inner_fn(xs)
    return counter.loads, counter.ops, counter.full_loads
