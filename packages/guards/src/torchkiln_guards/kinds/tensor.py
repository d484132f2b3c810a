"""TensorMatch: one fused check of a tensor's type, dtype, device, sizes, strides and autograd state."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import torch

from ..source import Source
from .base import CodeContext, Guard, GuardFailure, Raised

__all__ = ["TensorMatch"]


def _dispatch_keys(t: torch.Tensor) -> int:
    return torch._C._dispatch_keys(t).raw_repr()


def _static(v: Any) -> int | None:
    """A concrete int, or None for a symbolic (SymInt) value."""
    if isinstance(v, int):
        return int(v)
    if isinstance(v, torch.SymInt):
        as_int = v.node.maybe_as_int()
        return None if as_int is None else int(as_int)
    return int(v)


def _pinned_strides(
    strides: Sequence[int | None], dynamic: AbstractSet[int]
) -> tuple[int | None, ...]:
    """Strides that do not depend on a dynamic size. For a dense (possibly permuted) tensor a
    stride is the product of the sizes of the dims with smaller strides, so it is static when none
    of those dims is dynamic. Everything else is left to ShapeGuard / the contiguity check."""
    out: list[int | None] = []
    for i, st in enumerate(strides):
        if st is None:
            out.append(None)
            continue
        depends = any(
            j != i and j in dynamic and ((other := strides[j]) is None or other < st)
            for j in range(len(strides))
        )
        out.append(None if depends else st)
    return tuple(out)


@dataclass(frozen=True)
class TensorMatch(Guard):
    """The value is a tensor like the one captured.

    Checks, fused in one expression: exact type (``torch.Tensor`` or the subclass), dtype, device,
    number of dims, each pinned size and stride (``None`` = dynamic, left to ShapeGuard), storage
    offset, contiguity where strides are not all pinned, requires_grad, and, when
    ``dispatch_keys`` is not None, the raw dispatch key set (about 0.6-1 us, so only recorded by
    default for tensor subclasses and complex dtypes, where conj/neg bits live; for a plain dense
    tensor dtype/device/requires_grad/strides already determine its keys).
    """

    source: Source
    type_: type
    dtype: torch.dtype
    device: torch.device
    sizes: tuple[int | None, ...]
    strides: tuple[int | None, ...]
    storage_offset: int | None
    requires_grad: bool
    contiguous: bool | None = None
    dispatch_keys: int | None = None
    cost = 3

    @classmethod
    def from_tensor(
        cls,
        source: Source,
        tensor: torch.Tensor,
        dynamic_dims: AbstractSet[int] = frozenset(),
        *,
        check_dispatch_keys: bool | None = None,
    ) -> TensorMatch:
        """Guard that a later value matches ``tensor`` (real or fake). Sizes of ``dynamic_dims`` and
        of symbolic dims, and strides depending on them, are not pinned; their relations come from
        ShapeGuard. ``check_dispatch_keys`` defaults to True for subclasses and complex dtypes."""
        # Only look for FakeTensor if its module is loaded: a tensor cannot be fake otherwise.
        fake_mod = sys.modules.get("torch._subclasses.fake_tensor")
        is_fake = fake_mod is not None and isinstance(tensor, fake_mod.FakeTensor)
        type_ = torch.Tensor if is_fake else type(tensor)
        if is_fake and isinstance(tensor, torch.nn.Parameter):  # pragma: no cover - fake params
            type_ = torch.nn.Parameter
        sizes_raw = tuple(_static(s) for s in tensor.shape)
        dynamic = frozenset(d % max(tensor.dim(), 1) for d in dynamic_dims) | {
            i for i, s in enumerate(sizes_raw) if s is None
        }
        sizes = tuple(None if i in dynamic else s for i, s in enumerate(sizes_raw))
        strides_raw = tuple(_static(s) for s in tensor.stride())
        strides = _pinned_strides(strides_raw, dynamic)
        offset = _static(tensor.storage_offset())
        contiguous = None
        if None in strides:
            contiguous = bool(tensor.is_contiguous())
        if check_dispatch_keys is None:
            check_dispatch_keys = (type_ not in (torch.Tensor, torch.nn.Parameter)) or (
                tensor.dtype.is_complex
            )
        keys = _dispatch_keys(tensor) if check_dispatch_keys and not is_fake else None
        return cls(
            source=source,
            type_=type_,
            dtype=tensor.dtype,
            device=tensor.device,
            sizes=sizes,
            strides=strides,
            storage_offset=offset,
            requires_grad=bool(tensor.requires_grad),
            contiguous=contiguous,
            dispatch_keys=keys,
        )

    def _strides_by_contiguity(self) -> bool:
        """All sizes and strides pinned, and the strides are the contiguous ones (where it matters)."""
        expected = 1
        for size, stride in zip(reversed(self.sizes), reversed(self.strides)):
            if size is None or stride is None:
                return False
            if size > 1 and stride != expected:
                return False
            expected *= max(size, 1)
        return True

    def code(self, refs: Sequence[str], ctx: CodeContext) -> str:
        x = refs[0]
        parts = [
            f"{ctx.builtin('type')}({x}) is {ctx.const(self.type_, 'type')}",
            f"{x}.dtype is {ctx.const(self.dtype, 'dtype')}",
        ]
        # x.is_cpu is ~2x cheaper than comparing a freshly built torch.device.
        if self.device.type == "cpu":
            parts.append(f"{x}.is_cpu")
        else:
            parts.append(f"{x}.device == {ctx.const(self.device, 'device')}")
        if None not in self.sizes:
            parts.append(f"{x}.shape == {self.sizes!r}")
        else:
            parts.append(f"{x}.dim() == {len(self.sizes)}")
            shape = ctx.fresh("shape")
            pinned = [f"{shape}[{i}] == {s}" for i, s in enumerate(self.sizes) if s is not None]
            if pinned:
                parts[-1] = f"{ctx.builtin('len')}({shape} := {x}.shape) == {len(self.sizes)}"
                parts.extend(pinned)
        if self._strides_by_contiguity():
            # Same sizes + contiguous fixes every stride that matters (size-1 dims are never
            # indexed past 0), and is_contiguous() is ~2x cheaper than building stride().
            parts.append(f"{x}.is_contiguous()")
        elif None not in self.strides:
            parts.append(f"{x}.stride() == {self.strides!r}")
        elif any(s is not None for s in self.strides):
            st = ctx.fresh("stride")
            parts.append(f"({st} := {x}.stride()) is not None")
            parts.extend(f"{st}[{i}] == {s}" for i, s in enumerate(self.strides) if s is not None)
        if self.contiguous is not None:
            parts.append(f"{x}.is_contiguous() is {self.contiguous!r}")
        if self.storage_offset is not None:
            parts.append(f"{x}.storage_offset() == {self.storage_offset}")
        parts.append(f"{x}.requires_grad is {self.requires_grad!r}")
        if self.dispatch_keys is not None:
            parts.append(
                f"{ctx.const(_dispatch_keys, 'dispatch_keys')}({x}) == {self.dispatch_keys}"
            )
        return " and ".join(parts)

    def failure(self, value: Any) -> GuardFailure | None:
        e = self.source.expr()
        if type(value) is not self.type_:
            return self._fail(f"type({e})", self.type_, type(value))
        try:
            return self._first_mismatch(e, value)
        except Exception as exc:  # noqa: BLE001 - a broken tensor-like fails the guard, never raises
            return self._fail(e, "a tensor", Raised(exc))

    def _first_mismatch(self, e: str, x: Any) -> GuardFailure | None:  # a tensor (or a broken one)
        if x.dtype is not self.dtype:
            return self._fail(f"{e}.dtype", self.dtype, x.dtype)
        if x.device != self.device:
            return self._fail(f"{e}.device", self.device, x.device)
        if x.dim() != len(self.sizes):
            return self._fail(f"{e}.dim()", len(self.sizes), x.dim())
        for i, s in enumerate(self.sizes):
            if s is not None and x.shape[i] != s:
                return self._fail(f"{e}.size()[{i}]", s, x.shape[i])
        stride = x.stride()
        by_contiguity = self._strides_by_contiguity()
        if not by_contiguity or not x.is_contiguous():
            for i, s in enumerate(self.strides):
                size = self.sizes[i]  # never None when by_contiguity
                if by_contiguity and size is not None and size <= 1:
                    continue
                if s is not None and stride[i] != s:
                    return self._fail(f"{e}.stride()[{i}]", s, stride[i])
            if by_contiguity:
                return self._fail(f"{e}.is_contiguous()", True, False)
        if self.contiguous is not None and x.is_contiguous() != self.contiguous:
            return self._fail(f"{e}.is_contiguous()", self.contiguous, x.is_contiguous())
        if self.storage_offset is not None and x.storage_offset() != self.storage_offset:
            return self._fail(f"{e}.storage_offset()", self.storage_offset, x.storage_offset())
        if x.requires_grad is not self.requires_grad:
            return self._fail(f"{e}.requires_grad", self.requires_grad, x.requires_grad)
        if self.dispatch_keys is not None and _dispatch_keys(x) != self.dispatch_keys:
            return self._fail(
                f"torch._C._dispatch_keys({e})",
                _Keys(self.dispatch_keys),
                _Keys(_dispatch_keys(x)),
            )
        return None


class _Keys:
    """A raw dispatch key set, shown in hex."""

    def __init__(self, raw: int):
        self.raw = raw

    def __repr__(self) -> str:
        return f"DispatchKeySet(raw={self.raw:#x})"
