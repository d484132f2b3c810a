"""Values and scopes of generated C++: what the ops handler and the reductions share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


class Scope:
    """A C++ block: its statements and the values computed in it (for CSE)."""

    def __init__(self, parent: Scope | None):
        self.parent = parent
        self.lines: list[Any] = []  # str, or RLoop placeholders in the x body
        self.cse: dict[str, CppValue] = {}

    def chain(self) -> list[Scope]:
        out, s = [], self
        while s is not None:
            out.append(s)
            s = s.parent
        return out


@dataclass(eq=False)
class CppValue:
    """A value in generated code: a C++ expression (usually a variable) of a torch dtype."""

    expr: str
    dtype: torch.dtype
    scope: Scope | None  # None: a literal, valid everywhere
    post: Any = None  # the RLoop whose reduction result this derives from: lives after it

    def __str__(self) -> str:
        return self.expr
