"""Guards on state outside the arguments: torch's global modes, and storage aliasing between inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..source import Source
from .base import CodeContext, Guard, GuardFailure

__all__ = ["GlobalStateMatch", "StorageAliasGroups", "StorageAliasMatch", "alias_pattern"]


def _any_autocast_fallback() -> bool:  # pragma: no cover - only on torch without the fast query
    return any(torch.is_autocast_enabled(d) for d in _AUTOCAST_DEVICES)


# The one place torch version differences are handled for this package: how each piece of global
# state is read (the fastest reader each torch version offers).
_READERS: dict[str, Callable] = {
    "grad_enabled": torch._C.is_grad_enabled,
    "any_autocast": getattr(torch._C, "_is_any_autocast_enabled", _any_autocast_fallback),
    "autocast_enabled": torch.is_autocast_enabled,
    "autocast_dtype": torch.get_autocast_dtype,
    "default_dtype": torch.get_default_dtype,
    "deterministic": getattr(
        torch._C, "_get_deterministic_algorithms", torch.are_deterministic_algorithms_enabled
    ),
    "torch_function_modes": torch._C._len_torch_function_stack,
}
_AUTOCAST_DEVICES = ("cpu", "cuda")

# How each reading is written in a failure message.
_EXPRS = {
    "grad_enabled": "torch.is_grad_enabled()",
    "default_dtype": "torch.get_default_dtype()",
    "deterministic": "torch.are_deterministic_algorithms_enabled()",
    "torch_function_modes": "len(torch function mode stack)",
}


def _autocast_state() -> tuple[tuple[str, bool, torch.dtype | None], ...]:
    out = []
    for dev in _AUTOCAST_DEVICES:
        on = bool(_READERS["autocast_enabled"](dev))
        out.append((dev, on, _READERS["autocast_dtype"](dev) if on else None))
    return tuple(out)


@dataclass(frozen=True)
class GlobalStateMatch(Guard):
    """The global torch state the capture depended on is unchanged: grad mode, autocast (enabled
    and dtype per device), default dtype, deterministic-algorithms flag, torch function mode stack
    depth. Make one with ``GlobalStateMatch.capture()``."""

    grad_enabled: bool
    autocast: tuple[tuple[str, bool, torch.dtype | None], ...]
    default_dtype: torch.dtype
    deterministic: bool
    torch_function_modes: int
    cost = 5

    @classmethod
    def capture(cls) -> GlobalStateMatch:
        """Snapshot the current global state."""
        return cls(
            grad_enabled=bool(_READERS["grad_enabled"]()),
            autocast=_autocast_state(),
            default_dtype=_READERS["default_dtype"](),
            deterministic=bool(_READERS["deterministic"]()),
            torch_function_modes=int(_READERS["torch_function_modes"]()),
        )

    @property
    def sources(self) -> tuple[Source, ...]:
        return ()

    def summary(self) -> str:
        return "GlobalStateMatch()"

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        def call(key: str, *args: Any) -> str:
            return f"{ctx.const(_READERS[key], key)}({', '.join(map(repr, args))})"

        parts = [f"{call('grad_enabled')} is {self.grad_enabled!r}"]
        if not any(on for _, on, _ in self.autocast):
            parts.append(f"not {call('any_autocast')}")
        else:
            for dev, on, dtype in self.autocast:
                parts.append(f"{call('autocast_enabled', dev)} is {on!r}")
                if on:
                    parts.append(f"{call('autocast_dtype', dev)} is {ctx.const(dtype, 'dtype')}")
        parts.append(f"{call('default_dtype')} is {ctx.const(self.default_dtype, 'dtype')}")
        parts.append(f"{call('deterministic')} is {self.deterministic!r}")
        parts.append(f"{call('torch_function_modes')} == {self.torch_function_modes}")
        return " and ".join(parts)

    def failure(self) -> GuardFailure | None:
        now = GlobalStateMatch.capture()
        for key in ("grad_enabled", "default_dtype", "deterministic", "torch_function_modes"):
            if getattr(now, key) != getattr(self, key):
                return self._fail(_EXPRS[key], getattr(self, key), getattr(now, key))
        for (dev, on, dtype), (_, on_now, dtype_now) in zip(self.autocast, now.autocast):
            if on != on_now:
                return self._fail(f"torch.is_autocast_enabled({dev!r})", on, on_now)
            if dtype != dtype_now:
                return self._fail(f"torch.get_autocast_dtype({dev!r})", dtype, dtype_now)
        return None


def _storage_id(t: torch.Tensor) -> int:
    # _cdata is the address of the StorageImpl: stable across the fresh Python wrappers that
    # untyped_storage() returns, and distinct for two empty storages (data_ptr() would be 0 for both).
    return t.untyped_storage()._cdata


@dataclass(frozen=True)
class StorageAliasMatch(Guard):
    """Two tensor inputs share a storage (``alias=True``) or do not (``alias=False``)."""

    source_a: Source
    source_b: Source
    alias: bool
    cost = 6

    @property
    def sources(self) -> tuple[Source, ...]:
        return (self.source_a, self.source_b)

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        a, b = refs
        op = "==" if self.alias else "!="
        return f"{a}.untyped_storage()._cdata {op} {b}.untyped_storage()._cdata"

    def failure(self, a: Any, b: Any) -> GuardFailure | None:
        same = _storage_id(a) == _storage_id(b)
        if same == self.alias:
            return None
        return self._fail(
            f"{self.source_a.expr()} aliases {self.source_b.expr()}", self.alias, same
        )


def alias_pattern(tensors: Sequence[Any]) -> tuple[int, ...]:
    """For each tensor, the position of the first tensor sharing its storage (itself if none)."""
    first: dict[object, int] = {}
    return tuple(first.setdefault(_storage_key(t, i), i) for i, t in enumerate(tensors))


def _storage_key(t: torch.Tensor, i: int) -> object:
    try:
        return _storage_id(t)
    except (RuntimeError, NotImplementedError, AttributeError):  # no storage (sparse, a subclass)
        return ("no storage", i)


@dataclass(frozen=True)
class StorageAliasGroups(Guard):
    """Which of the tensor inputs share a storage is as captured: one check over all of them.

    ``pattern[i]`` is the position of the first source whose tensor shares a storage with source
    ``i`` (``i`` itself when none before it does). Unlike pairwise StorageAliasMatch guards it
    costs one storage read per input, so every input is covered, however many there are.
    Construct with ``StorageAliasGroups.from_tensors(sources, tensors)``.
    """

    sources_: tuple[Source, ...]
    pattern: tuple[int, ...]
    cost = 6

    @classmethod
    def from_tensors(cls, sources: Sequence[Source], tensors: Sequence[Any]) -> StorageAliasGroups:
        return cls(tuple(sources), alias_pattern(tensors))

    @property
    def sources(self) -> tuple[Source, ...]:
        return self.sources_

    def summary(self) -> str:
        return f"StorageAliasGroups({len(self.sources_)} tensors)"

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        if len(refs) == 2:
            op = "!=" if self.pattern == (0, 1) else "=="
            return f"{refs[0]}.untyped_storage()._cdata {op} {refs[1]}.untyped_storage()._cdata"
        if self.pattern == tuple(range(len(refs))):
            # the common case, no sharing: one set of storage ids, built inline (~2x faster)
            ids = ", ".join(f"{r}.untyped_storage()._cdata" for r in refs)
            return f"{ctx.builtin('len')}({{{ids}}}) == {len(refs)}"
        return (
            f"{ctx.const(alias_pattern, 'alias_pattern')}(({', '.join(refs)},)) == {self.pattern!r}"
        )

    def failure(self, *tensors: Any) -> GuardFailure | None:
        now = alias_pattern(tensors)
        for i, (want, got) in enumerate(zip(self.pattern, now)):
            if want != got:
                which = self.sources_[i].expr()
                return self._fail(
                    f"{which} shares a storage with",
                    _Shares(self.sources_[want].expr() if want != i else None),
                    _Shares(self.sources_[got].expr() if got != i else None),
                )
        return None


class _Shares:
    """Reads as ``L['x']`` or ``no earlier input`` in a failure message."""

    def __init__(self, expr: str | None):
        self.text = expr if expr is not None else "no earlier input"

    def __repr__(self) -> str:
        return self.text
