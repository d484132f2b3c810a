"""Mutations of Python state seen during capture, replayed (in program order) after the graph runs;
and logging calls, which run there too instead of breaking the graph."""

from __future__ import annotations

import types

from .exc import Unsupported


class SideEffects:
    """Records mutated lists/dicts from outside, attribute stores, global and closure-cell stores.

    Reads during capture see the recorded values (``attr_value``, ``cell_value``, ``global_value``);
    ``entries`` lists what to replay, in the order each target was first mutated.
    """

    def __init__(self) -> None:
        self.entries: list[tuple] = []  # (kind, target, key, value)
        self._index: dict[tuple, int] = {}

    def _record(self, key: tuple, entry: tuple) -> None:
        if key in self._index:
            self.entries[self._index[key]] = entry
        else:
            self._index[key] = len(self.entries)
            self.entries.append(entry)

    def mutated(self, container_var) -> None:
        """A list or dict variable changed; if it came from outside, rewrite it after the graph."""
        if container_var.source is not None:
            self._record(("container", id(container_var)), ("container", container_var, None, None))
        elif container_var.untracked_real:
            raise _untracked(container_var)

    def is_mutated(self, container_var) -> bool:
        """Whether ``container_var`` (a list or dict from outside) changed during this capture."""
        return ("container", id(container_var)) in self._index

    def store_attr(self, obj_var, name: str, value) -> None:
        if obj_var.source is None and obj_var.untracked_real:
            raise _untracked(obj_var)
        self._record(("attr", id(obj_var.value), name), ("attr", obj_var, name, value))

    def attr_value(self, obj, name: str):
        i = self._index.get(("attr", id(obj), name))
        return None if i is None else self.entries[i][3]

    def store_cell(self, cell_var, value) -> None:
        """A store into a real cell (``cell_var`` a RealCellVariable: its reconstruction says how the
        run function reaches the cell, which may be a new one each call)."""
        self._record(("cell", id(cell_var.cell)), ("cell", cell_var, None, value))

    def cell_value(self, cell: types.CellType):
        i = self._index.get(("cell", id(cell)))
        return None if i is None else self.entries[i][3]

    def store_global(self, f_globals: dict, name: str, value) -> None:
        self._record(("global", id(f_globals), name), ("global", f_globals, name, value))

    def global_value(self, f_globals: dict, name: str):
        i = self._index.get(("global", id(f_globals), name))
        return None if i is None else self.entries[i][3]

    def call(self, fn, args: list, kwargs: dict) -> None:
        """``fn(*args, **kwargs)`` (constants) runs after the graph: a log record or a warning."""
        self._record(("call", len(self.entries)), ("call", fn, args, kwargs))

    def __len__(self) -> int:
        return len(self.entries)


def _untracked(var) -> Unsupported:
    kind = var.python_type().__name__
    return Unsupported(
        f"mutating a {kind} that existed before the call and that capture reached with no "
        "path it could write back through (held by a functools.partial, a function's "
        "closure or defaults reached without a source, ...)",
        "the mutation runs in Python between two graphs, so it happens exactly as written",
    )
