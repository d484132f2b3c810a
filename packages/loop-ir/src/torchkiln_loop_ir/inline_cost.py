"""How costly a pointwise value is to inline: its loads and other ops (the realize policy's
measure, ``count_reads_and_ops``), counted by running its body under a counting ops handler."""

from __future__ import annotations

import sympy

from .handlers import DefaultHandler
from .indexing import index_symbol
from .ir import Pointwise
from .ops import ALL_OPS, set_ops_handler


class _Counter(DefaultHandler):
    """An ops handler counting loads and other ops, to judge whether inlining is cheap."""

    default_ops = ALL_OPS

    def __init__(self) -> None:
        self.loads = 0
        self.ops = 0

    def load(self, name, index):
        self.loads += 1

    def indirect_indexing(self, value, size, check=True):
        return sympy.Symbol("i_tmp", integer=True, nonnegative=True)

    def masked(self, mask, body, other):
        self.ops += 1
        return body()

    def default(self, name, args, kwargs):
        self.ops += 1


def count_reads_and_ops(pw: Pointwise) -> tuple[int, int]:
    # abstract to mypy only: the ops are set on DefaultHandler at import (handlers.py)
    counter = _Counter()  # type: ignore[abstract]
    with set_ops_handler(counter):
        pw.inner_fn([index_symbol("x", i) for i in range(len(pw.ranges))])
    return counter.loads, counter.ops
