"""Guards on nn.Modules: the training flag, and that no hook was added or removed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.nn.modules.module as _module_mod

from ..source import Source
from .base import CodeContext, Guard, GuardFailure

__all__ = ["ModuleHooksMatch", "ModuleTrainingMatch"]

# Per-module hook dicts nn.Module.__call__ reads, each with the dicts (keyed by the same handle
# ids) that say how a hook is called: with kwargs, and even when forward raises.
_MODULE_HOOK_DICTS = (
    ("_forward_hooks", ("_forward_hooks_with_kwargs", "_forward_hooks_always_called")),
    ("_forward_pre_hooks", ("_forward_pre_hooks_with_kwargs",)),
    ("_backward_hooks", ()),
    ("_backward_pre_hooks", ()),
)
# The global hook dicts (register_module_forward_hook & co.), the same way; absent names are skipped.
_GLOBAL_HOOK_DICTS = tuple(
    (name, flags)
    for name, flags in (
        (
            "_global_forward_hooks",
            ("_global_forward_hooks_with_kwargs", "_global_forward_hooks_always_called"),
        ),
        ("_global_forward_pre_hooks", ()),
        ("_global_backward_hooks", ()),
        ("_global_backward_pre_hooks", ()),
    )
    if isinstance(getattr(_module_mod, name, None), dict)
)
_NO_FLAGS: dict = {}


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


def _hooks(owner: Any, name: str, flag_names: tuple) -> tuple:
    """``((hook, (in each flag dict, ...)), ...)`` in call order: what nn.Module.__call__ does with
    the hooks of one dict. The handle ids (the keys) are not part of it: a module made anew on
    every call gets new ids for the same hook, and must not recompile for that."""
    d = getattr(owner, name, _NO_FLAGS)
    flags = [getattr(owner, f, _NO_FLAGS) for f in flag_names]
    return tuple((hook, tuple(k in f for f in flags)) for k, hook in d.items())


def _same_hooks(owner: Any, name: str, flag_names: tuple, expected: tuple) -> bool:
    """The generated guard's test for a non-empty snapshot: the same hook objects (by identity),
    in the same order, called the same way."""
    actual = _hooks(owner, name, flag_names)
    return len(actual) == len(expected) and all(
        a[0] is e[0] and a[1] == e[1] for a, e in zip(actual, expected)
    )


def _snapshot_key(hooks: tuple) -> tuple:
    # equality and hashing of the guard by hook identity (a hook object may not be hashable)
    return tuple((id(h), flags) for h, flags in hooks)


@dataclass(frozen=True)
class ModuleHooksMatch(Guard):
    """The module's hook dicts and the global module hook dicts hold the same hooks, in the same
    order and called the same way (with kwargs, always called), as when captured.

    Construct with ``ModuleHooksMatch(source, module)``; the hooks are snapshotted then and held
    (compared by identity). A new hook object (even for the same code) fails the guard: capture
    read that object's closure and globals.
    """

    source: Source
    module: Any = field(compare=False, repr=False)
    module_hooks: tuple = field(init=False)
    global_hooks: tuple = field(init=False)
    held: tuple = field(init=False, compare=False, repr=False)
    cost = 4

    def __post_init__(self) -> None:
        own = tuple((n, _hooks(self.module, n, flags)) for n, flags in _MODULE_HOOK_DICTS)
        glob = tuple((n, _hooks(_module_mod, n, flags)) for n, flags in _GLOBAL_HOOK_DICTS)
        object.__setattr__(self, "held", (own, glob))
        object.__setattr__(self, "module_hooks", tuple((n, _snapshot_key(h)) for n, h in own))
        object.__setattr__(self, "global_hooks", tuple((n, _snapshot_key(h)) for n, h in glob))
        object.__setattr__(
            self, "module", None
        )  # the snapshot is all we need; do not pin the module

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        m = refs[0]
        own, glob = self.held
        parts = [
            _dict_test(m, f"{m}.{name}", name, flags, hooks, ctx)
            for (name, flags), (_, hooks) in zip(_MODULE_HOOK_DICTS, own)
        ]
        mod = ctx.const(_module_mod, "nn_module")
        parts += [
            _dict_test(mod, f"{mod}.{name}", name, flags, hooks, ctx)
            for (name, flags), (_, hooks) in zip(_GLOBAL_HOOK_DICTS, glob)
        ]
        return " and ".join(parts)

    def failure(self, value: Any) -> GuardFailure | None:
        e = self.source.expr()
        own, glob = self.held
        for (name, flags), (_, hooks) in zip(_MODULE_HOOK_DICTS, own):
            if not _same_hooks(value, name, flags, hooks):
                return self._fail(f"{e}.{name}", _show(hooks), _show(_hooks(value, name, flags)))
        for (name, flags), (_, hooks) in zip(_GLOBAL_HOOK_DICTS, glob):
            if not _same_hooks(_module_mod, name, flags, hooks):
                return self._fail(
                    f"torch.nn.modules.module.{name}",
                    _show(hooks),
                    _show(_hooks(_module_mod, name, flags)),
                )
        return None


def _show(hooks: tuple) -> tuple:
    return tuple(getattr(h, "__qualname__", type(h).__name__) for h, _ in hooks)


def _dict_test(
    owner_ref: str, ref: str, name: str, flags: tuple, hooks: tuple, ctx: CodeContext
) -> str:
    # An empty dict is the common case: `not d` is the cheapest test there is.
    if not hooks:
        return f"not {ref}"
    return (
        f"{ctx.const(_same_hooks, 'same_hooks')}({owner_ref}, {name!r}, {flags!r}, "
        f"{ctx.const(hooks, 'hooks')})"
    )
