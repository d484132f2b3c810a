"""Capture-side guard kinds: what capture needs that torchkiln_guards has no kind for.

Each follows torchkiln_guards' Guard protocol (``sources``, ``cost``, ``code(refs, ctx)``,
``failure(*values)``) and is compiled by ``torchkiln_guards.compile_guards`` with the others:
- ``SameObjectMatch``: two inputs are (or are not) the same object (StorageAliasMatch compares
  storages, so it cannot tell ``f(x, x)`` from ``f(x, x.t())``);
- ``ValueEqualsMatch``: equality with a value ConstantMatch does not accept (torch.Size, slice, ...);
- ``SubmoduleHooksMatch`` / ``ChildModulesMatch``: the hook dicts and ``_modules`` slots of every
  submodule under a guarded root, held by reference and checked in one C-level loop each
  (ModuleHooksMatch per submodule would cost 8 tests per module); ``batch_guards`` merges them.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

from torchkiln_guards import Guard, Source

__all__ = [
    "ChildModulesMatch",
    "SameObjectMatch",
    "SubmoduleHooksMatch",
    "ValueEqualsMatch",
    "batch_guards",
]


@dataclass(frozen=True)
class SameObjectMatch(Guard):
    """``source_b`` is (``same=True``) or is not the same object as ``source_a``."""

    source_a: Source
    source_b: Source
    same: bool
    cost = 0

    @property
    def sources(self) -> tuple[Source, ...]:
        return (self.source_a, self.source_b)

    def code(self, refs, ctx):
        return f"{refs[1]} {'is' if self.same else 'is not'} {refs[0]}"

    def failure(self, a, b):
        if (a is b) == self.same:
            return None
        return self._fail(f"{self.source_b.expr()} is {self.source_a.expr()}", self.same, a is b)


@dataclass(frozen=True)
class ValueEqualsMatch(Guard):
    """``type(v) is type(value) and v == value`` for values ConstantMatch rejects."""

    source: Source
    value: Any = field(compare=False)
    cost = 1

    def __hash__(self):
        return hash((self.source, type(self.value)))

    def code(self, refs, ctx):
        v = refs[0]
        return f"{ctx.builtin('type')}({v}) is {ctx.const(type(self.value), 'type')} and {v} == {ctx.const(self.value, 'value')}"

    def failure(self, value):
        if type(value) is type(self.value) and value == self.value:
            return None
        return self._fail(self.source.expr(), self.value, value)


@dataclass(frozen=True, eq=False)
class SubmoduleHooksMatch(Guard):
    """The given hook dicts (of submodules reached under a guarded root) hold the keys seen at capture."""

    dicts: tuple = field(repr=False)
    keys: tuple = ()
    label: str = "submodule hooks"
    cost = 4

    @staticmethod
    def of(dicts, label: str) -> SubmoduleHooksMatch:
        return SubmoduleHooksMatch(tuple(dicts), tuple(tuple(d) for d in dicts), label)

    @property
    def sources(self) -> tuple[Source, ...]:
        return ()

    def summary(self) -> str:
        return f"SubmoduleHooksMatch({len(self.dicts)} hook dicts)"

    def code(self, refs, ctx):
        if not any(self.keys):
            return f"not {ctx.builtin('any')}({ctx.builtin('map')}({ctx.builtin('len')}, {ctx.const(self.dicts, 'hook_dicts')}))"
        return f"{ctx.builtin('tuple')}({ctx.builtin('map')}({ctx.builtin('tuple')}, {ctx.const(self.dicts, 'hook_dicts')})) == {ctx.const(self.keys, 'hook_keys')}"

    def failure(self):
        for d, keys, label in zip(self.dicts, self.keys, self.label.split("\n")):
            if tuple(d) != keys:
                return self._fail(f"tuple({label})", keys, tuple(d))
        return None


@dataclass(frozen=True, eq=False)
class ChildModulesMatch(Guard):
    """``parent._modules[name] is child`` for each (modules dict, name, child, label) given."""

    slots: tuple = field(repr=False)
    cost = 4

    @property
    def sources(self) -> tuple[Source, ...]:
        return ()

    def summary(self) -> str:
        return f"ChildModulesMatch({len(self.slots)} submodules)"

    def code(self, refs, ctx):
        mods, names, kids = (tuple(x) for x in zip(*((m, n, c) for m, n, c, _ in self.slots)))
        is_, get = ctx.const(operator.is_, "is_"), ctx.const(dict.get, "dict_get")
        return (
            f"{ctx.builtin('all')}({ctx.builtin('map')}({is_}, {ctx.builtin('map')}({get}, "
            f"{ctx.const(mods, 'mods')}, {ctx.const(names, 'names')}), {ctx.const(kids, 'kids')}))"
        )

    def failure(self):
        for mods, name, child, label in self.slots:
            now = mods.get(name)
            if now is not child:
                return self._fail(label, _Named(child), _Named(now))
        return None


class _Named:
    def __init__(self, obj):
        self.text = "None" if obj is None else f"{type(obj).__name__} (id {id(obj):#x})"

    def __repr__(self):
        return self.text


def batch_guards(guards: list) -> list:
    """Merge the per-submodule hook and child guards into one of each (one C-level loop per call)."""
    hooks = [g for g in guards if isinstance(g, SubmoduleHooksMatch)]
    kids = [g for g in guards if isinstance(g, ChildModulesMatch)]
    out = [g for g in guards if not isinstance(g, (SubmoduleHooksMatch, ChildModulesMatch))]
    if hooks:
        seen: dict[int, tuple] = {}
        for g in hooks:
            for d, k, label in zip(g.dicts, g.keys, g.label.split("\n")):
                seen.setdefault(id(d), (d, k, label))
        ds, ks, labels = zip(*seen.values())
        out.append(SubmoduleHooksMatch(ds, ks, "\n".join(labels)))
    if kids:
        slots = {(id(m), n): (m, n, c, lab) for g in kids for m, n, c, lab in g.slots}
        out.append(ChildModulesMatch(tuple(slots.values())))
    return out
