"""Guards the capture relied on, compiled to one generated check function per cache entry.

This is a local adapter with the shape of torchkiln-guards' API (sources, guard kinds, a compiled
check with ``explain_failure``); the capture layer only needs ``GuardSet.add`` and ``compile``.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any

import torch

from ._codegen import Namespace, signature_text
from ._sources import Source


@dataclass(frozen=True)
class Guard:
    source: Source

    def code(self, ns: Namespace) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        return self.code(Namespace())


@dataclass(frozen=True)
class TensorMatch(Guard):
    """Type, dtype, device, sizes, strides and requires_grad of a tensor (static shapes)."""

    cls: type
    dtype: torch.dtype
    device: torch.device
    size: tuple
    stride: tuple
    requires_grad: bool

    @staticmethod
    def from_tensor(source: Source, t: torch.Tensor) -> TensorMatch:
        return TensorMatch(source, type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()), t.requires_grad)

    def code(self, ns: Namespace) -> str:
        e = self.source.expr()
        return (
            f"type({e}) is {ns.ref(self.cls)} and {e}.dtype is {ns.ref(self.dtype)} and "
            f"{e}.device == {ns.ref(self.device)} and {e}.shape == {self.size!r} and "
            f"{e}.stride() == {self.stride!r} and {e}.requires_grad is {self.requires_grad}"
        )


@dataclass(frozen=True)
class TypeMatch(Guard):
    type_: type

    def code(self, ns: Namespace) -> str:
        return f"type({self.source.expr()}) is {ns.ref(self.type_)}"


@dataclass(frozen=True)
class IdMatch(Guard):
    obj_id: int
    label: str = ""

    def code(self, ns: Namespace) -> str:
        return f"id({self.source.expr()}) == {self.obj_id}"


@dataclass(frozen=True)
class ConstantMatch(Guard):
    value: Any

    def code(self, ns: Namespace) -> str:
        v = self.value
        if v is None or isinstance(v, bool):
            return f"{self.source.expr()} is {v!r}"
        if type(v) in (int, str, float) and not (isinstance(v, float) and math.isnan(v)):
            return f"type({self.source.expr()}) is {type(v).__name__} and {self.source.expr()} == {v!r}"
        return f"{self.source.expr()} == {ns.ref(v)}"


@dataclass(frozen=True)
class LengthMatch(Guard):
    n: int

    def code(self, ns: Namespace) -> str:
        return f"len({self.source.expr()}) == {self.n}"


@dataclass(frozen=True)
class DictKeysMatch(Guard):
    keys: tuple

    def code(self, ns: Namespace) -> str:
        return f"tuple({self.source.expr()}.keys()) == {ns.ref(self.keys)}"


@dataclass(frozen=True)
class HasAttr(Guard):
    name: str
    present: bool

    def code(self, ns: Namespace) -> str:
        return f"hasattr({self.source.expr()}, {self.name!r}) is {self.present}"


@dataclass(frozen=True)
class ModuleHooksMatch(Guard):
    """The module's forward hooks and pre-hooks are the ones seen at capture (by count)."""

    n_hooks: int

    def code(self, ns: Namespace) -> str:
        e = self.source.expr()
        return f"len({e}._forward_hooks) + len({e}._forward_pre_hooks) == {self.n_hooks}"


@dataclass(frozen=True)
class HookDictsMatch(Guard):
    """A module's hook dicts (held by reference: the root's identity stands for its tree) keep their size."""

    dicts: tuple = field(compare=False, hash=False)
    ids: tuple = ()
    n_hooks: int = 0

    def code(self, ns: Namespace) -> str:
        return " + ".join(f"len({ns.ref(d)})" for d in self.dicts) + f" == {self.n_hooks}"


@dataclass(frozen=True)
class StorageAliasMatch(Guard):
    """Two tensor inputs are (alias=True) or are not (alias=False) the same object."""

    other: Source = None
    alias: bool = False

    def code(self, ns: Namespace) -> str:
        return f"({self.source.expr()} is {self.other.expr()}) is {self.alias}"


@dataclass(frozen=True)
class ChildModuleMatch(Guard):
    """``parent._modules[name]`` is still the submodule seen at capture (held by reference)."""

    modules: dict = field(compare=False, hash=False)
    modules_id: int = 0
    name: str = ""
    child: object = field(compare=False, hash=False, default=None)
    child_id: int = 0

    def code(self, ns: Namespace) -> str:
        return f"{ns.ref(self.modules)}.get({self.name!r}) is {ns.ref(self.child)}"


@dataclass(frozen=True)
class GlobalStateMatch(Guard):
    grad_enabled: bool

    def code(self, ns: Namespace) -> str:
        return f"{ns.ref(torch.is_grad_enabled)}() is {self.grad_enabled}"


@dataclass
class GuardFailure:
    guard: str
    reason: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.guard}"


@dataclass
class CompiledGuards:
    check: Any
    source: str
    parts: list
    parts_fn: list = field(default_factory=list)

    def explain_failure(self, *args, **kwargs) -> GuardFailure | None:
        for text, fn in zip(self.parts, self.parts_fn):
            try:
                ok = fn(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 - a source that no longer resolves is a failure too
                return GuardFailure(text, f"raised {type(e).__name__}")
            if not ok:
                return GuardFailure(text, "guard failed")
        return None


def _batched(guards, ns: Namespace) -> list[str]:
    """Guard expressions for the hot check: per-submodule guards are folded into C-level loops."""
    hooks = [g for g in guards if isinstance(g, HookDictsMatch) and g.n_hooks == 0]
    children = [g for g in guards if isinstance(g, ChildModuleMatch)]
    out = [g.code(ns) for g in guards if not (g in hooks or g in children)]
    if hooks:
        dicts = tuple(d for g in hooks for d in g.dicts)
        out.append(f"not any(map(len, {ns.ref(dicts)}))")
    if children:
        mods, names, kids = (tuple(x) for x in zip(*((g.modules, g.name, g.child) for g in children)))
        out.append(f"all(map({ns.ref(operator.is_)}, map({ns.ref(dict.get)}, {ns.ref(mods)}, {ns.ref(names)}), {ns.ref(kids)}))")
    return out


class GuardSet:
    """Guards in insertion order, without duplicates."""

    def __init__(self) -> None:
        self._guards: dict[Guard, None] = {}

    def add(self, guard: Guard) -> None:
        self._guards.setdefault(guard, None)

    def __iter__(self):
        return iter(self._guards)

    def __len__(self) -> int:
        return len(self._guards)

    def compile(self, fn_signature, f_globals: dict, cells: dict, extra: dict | None = None) -> CompiledGuards:
        """One generated ``check(<user params>) -> bool``; a raising source counts as a miss."""
        ns = Namespace()
        ns.values["_G"] = f_globals
        ns.values["_cells"] = cells
        ns.values.update(extra or {})
        params, _ = signature_text(fn_signature, ns)
        parts = [g.code(ns) for g in self._guards]
        body = " and \\\n        ".join(f"({p})" for p in _batched(self._guards, ns)) or "True"
        src = f"def check({params}):\n    try:\n        return {body}\n    except Exception:\n        return False\n"
        check = ns.exec(src, "check")
        parts_fn = [ns.exec(f"def part({params}):\n    return {p}\n", "part") for p in parts]
        return CompiledGuards(check, src, parts, parts_fn)
