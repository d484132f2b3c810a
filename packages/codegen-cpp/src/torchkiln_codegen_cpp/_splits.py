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

    def note_index(self, name: str, expr: sympy.Expr) -> None:
        """``name`` holds ``expr`` (an index expression, as an integer or float)."""
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            self.ints[name] = int(expr)
        elif self.var is not None and expr.free_symbols == {self.var}:
            k = expr - self.var
            if k.is_Integer:
                self.offsets[name] = int(k)

    def note_cast(self, name: str, source: Any) -> None:
        """``name`` is ``source`` converted to another dtype (cat's masks compare int64 copies)."""
        src = str(source)
        if src in self.offsets:
            self.offsets[name] = self.offsets[src]
        elif (c := self._int(src)) is not None:
            self.ints[name] = c

    def note_compare(self, op: str, a: Any, b: Any) -> None:
        if op not in _COMPARISONS:
            return
        a, b = str(a), str(b)
        if a not in self.offsets and b in self.offsets:
            a, b, op = b, a, _SWAPPED[op]
        c = self._int(b)
        if a in self.offsets and c is not None:
            self.points.add(c + _COMPARISONS[op] - self.offsets[a])

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
