"""Where the innermost x-loop splits: the constants at which a comparison of the innermost index
with a constant changes value.

``cat`` (and constant padding) lowers to masks such as ``x3 >= 0 && x3 < 32`` on the innermost
index; inside one loop over all of x3 every element then pays both branches' index arithmetic,
and GCC vectorizes the masked loads poorly or not at all. Split the loop at those constants
(``[0, 32)``, ``[32, 48)``) and each piece sees loop bounds that decide every mask: GCC's value
ranges fold the masks away and each piece vectorizes as a plain copy or pointwise loop (unet's
cat + upsample kernel: 2-3x faster, benchmarks in the commit). The body is the same in every
piece; only the bounds differ, so splitting is always correct.
"""

from __future__ import annotations

import re
from typing import Any

import sympy
from torchkiln_loop_ir.indexing import ModularIndexing

# A comparison op -> how a constant c on its right bounds the innermost index on its left:
# ``x < c`` and ``x >= c`` change value at c, ``x <= c`` and ``x > c`` at c + 1.
_COMPARISONS = {"lt": 0, "ge": 0, "le": 1, "gt": 1}
_SWAPPED = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}
_LITERAL = re.compile(r"\(?(?:static_cast<[a-z0-9_]+>\()?\(?(-?\d+)(?:LL)?\)?\)?")
# more pieces than this are not worth the code size (an index compared with many constants)
MAX_PIECES = 8


class InnermostSplits:
    """Collects split points for the innermost x variable while a kernel's bodies are generated."""

    def __init__(self, var: sympy.Symbol | None):
        self.var = var
        self.offsets: dict[str, int] = {}  # value name -> k where the value is var + k
        self.ints: dict[str, int] = {}  # value name -> its integer constant
        self.points: set[int] = set()
        # value name -> (m, k) where the value is var % m + k; split points within a period of m
        self.remainders: dict[str, tuple[int, int]] = {}
        self.period_points: dict[int, set[int]] = {}

    def note_index(self, name: str, expr: sympy.Expr) -> None:
        """``name`` holds ``expr`` (an index expression, as an integer or float)."""
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            self.ints[name] = int(expr)
        elif self.var is not None and expr.free_symbols == {self.var}:
            k = expr - self.var
            if k.is_Integer:
                self.offsets[name] = int(k)
                return
            for term in sympy.Add.make_args(expr):
                if (
                    isinstance(term, ModularIndexing)
                    and term.args[0] == self.var
                    and term.args[1] == 1
                    and term.args[2].is_Integer
                    and int(term.args[2]) > 1
                    and (expr - term).is_Integer
                ):
                    self.remainders[name] = (int(term.args[2]), int(expr - term))

    def note_cast(self, name: str, source: Any) -> None:
        """``name`` is ``source`` converted to another dtype (cat's masks compare int64 copies)."""
        src = str(source)
        if src in self.offsets:
            self.offsets[name] = self.offsets[src]
        elif src in self.remainders:
            self.remainders[name] = self.remainders[src]
        elif (c := self._int(src)) is not None:
            self.ints[name] = c

    def note_compare(self, op: str, a: Any, b: Any) -> None:
        if op not in _COMPARISONS:
            return
        a, b = str(a), str(b)
        if (
            a not in self.offsets
            and a not in self.remainders
            and (b in self.offsets or b in self.remainders)
        ):
            a, b, op = b, a, _SWAPPED[op]
        c = self._int(b)
        if a in self.offsets and c is not None:
            self.points.add(c + _COMPARISONS[op] - self.offsets[a])
        elif a in self.remainders and c is not None:
            m, k = self.remainders[a]
            self.period_points.setdefault(m, set()).add(c + _COMPARISONS[op] - k)

    def _int(self, text: str) -> int | None:
        if text in self.ints:
            return self.ints[text]
        m = _LITERAL.fullmatch(text)
        return int(m.group(1)) if m else None

    def pieces(self, size: sympy.Expr) -> list[tuple[int, int]] | None:
        """The loop's ``[start, end)`` pieces, or None when it stays one loop (no split point
        inside a constant trip count)."""
        if not isinstance(size, sympy.Integer):
            return None
        n = int(size)
        cuts = sorted(p for p in self.points if 0 < p < n)
        if not cuts or len(cuts) + 1 > MAX_PIECES:
            return None
        bounds = [0, *cuts, n]
        return list(zip(bounds, bounds[1:]))

    def period_pieces(self, size: sympy.Expr) -> tuple[int, list[tuple[int, int]]] | None:
        """``(m, pieces)`` when masks compare only ``var % m`` (one ``m``, dividing the loop's
        constant trip count) with constants inside ``(0, m)``: the loop runs as periods of
        ``m``, each as the ``[start, end)`` pieces of ``var % m`` (rotate_half's cat read back
        per head: ``x1 % 32 < 16``). None: no such split."""
        if self.points or len(self.period_points) != 1 or not isinstance(size, sympy.Integer):
            return None
        ((m, points),) = self.period_points.items()
        n = int(size)
        cuts = sorted(p for p in points if 0 < p < m)
        if not cuts or n % m or len(cuts) + 1 > MAX_PIECES:
            return None
        bounds = [0, *cuts, m]
        return m, list(zip(bounds, bounds[1:]))
