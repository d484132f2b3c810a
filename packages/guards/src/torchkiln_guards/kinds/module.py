"""Guards on nn.Modules: the training flag, and that no hook was added or removed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.nn.modules.module as _module_mod

from ..source import Source
from .base import CodeContext, Guard, GuardFailure

__all__ = ["ModuleHooksMatch", "ModuleTrainingMatch"]

# Per-module hook dicts whose keys the capture depended on (handles are int ids, never reused).
_MODULE_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
# The global hook dicts (register_module_forward_hook & co.); absent names are skipped.
_GLOBAL_HOOK_DICTS = tuple(
    (name, getattr(_module_mod, name))
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
    if isinstance(getattr(_module_mod, name, None), dict)
)


@dataclass(frozen=True)
class ModuleTrainingMatch(Guard):
    """``module.training is training``."""

    source: Source
    training: bool
    cost = 1

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        return f"{refs[0]}.training is {bool(self.training)!r}"

    def failure(self, value: Any) -> GuardFailure | None:
        actual = value.training
        if actual is self.training:
            return None
        return self._fail(f"{self.source.expr()}.training", self.training, actual)


def _keys(d: Any) -> tuple:
    return tuple(d.keys())


@dataclass(frozen=True)
class ModuleHooksMatch(Guard):
    """The module's hook dicts and the global module hook dicts hold the same keys as when captured.

    Construct with ``ModuleHooksMatch(source, module)``; the keys are snapshotted then.
    """

    source: Source
    module: Any = field(compare=False, repr=False)
    module_hooks: tuple = field(init=False)
    global_hooks: tuple = field(init=False)
    cost = 4

    def __post_init__(self) -> None:
        snap = tuple((n, _keys(getattr(self.module, n, {}))) for n in _MODULE_HOOK_DICTS)
        object.__setattr__(self, "module_hooks", snap)
        object.__setattr__(self, "global_hooks", tuple((n, _keys(d)) for n, d in _GLOBAL_HOOK_DICTS))
        object.__setattr__(self, "module", None)  # the snapshot is all we need; do not pin it

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        m = refs[0]
        parts = [_dict_test(f"{m}.{name}", keys, ctx) for name, keys in self.module_hooks]
        for name, d in _GLOBAL_HOOK_DICTS:
            keys = dict(self.global_hooks).get(name, ())
            parts.append(_dict_test(ctx.const(d, name.lstrip("_")), keys, ctx))
        return " and ".join(parts)

    def failure(self, value: Any) -> GuardFailure | None:
        e = self.source.expr()
        for name, keys in self.module_hooks:
            actual = _keys(getattr(value, name))
            if actual != keys:
                return self._fail(f"tuple({e}.{name})", keys, actual)
        expected_global = dict(self.global_hooks)
        for name, d in _GLOBAL_HOOK_DICTS:
            actual = _keys(d)
            if actual != expected_global.get(name, ()):
                return self._fail(
                    f"tuple(torch.nn.modules.module.{name})", expected_global.get(name, ()), actual
                )
        return None


def _dict_test(ref: str, keys: tuple, ctx: CodeContext) -> str:
    # An empty dict is the common case: `not d` is the cheapest test there is.
    return f"not {ref}" if not keys else f"{ctx.builtin('tuple')}({ref}) == {keys!r}"
