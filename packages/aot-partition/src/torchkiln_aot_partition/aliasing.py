"""Graph inputs that share a storage (``f(x, x[0])``, overlapping slices): synthetic bases.

Functionalization treats each graph input as its own tensor, so with ``a = x`` and ``b = x[0]``,
``a.mul_(2); return b + 0`` would read the old ``b``, and the copy-back of ``a`` and ``b`` would
race. When inputs that share a storage are mutated, the graph is traced instead with one *base*
per storage (a 1-D view from the storage's first element to the last one an alias covers), and
each aliased input is recreated inside the graph as ``base.as_strided(size, stride,
storage_offset)`` with its real geometry. Functionalization then sees one tensor and its views:
a write through one view is read through the others, and the mutation copied back is the
base's, which updates every alias at once.

Only static geometry of the aliased inputs is handled (capture guards it: TensorMatch pins
sizes, strides and storage offsets, StorageAliasGroups which inputs share a storage). Under
dynamic shapes capture keeps the sizes of arguments that share a storage static, so the bases
are static while the graph's other inputs stay symbolic; an aliased, mutated input with symbolic
geometry (one capture did not see as an argument) raises AOTError, so the graph runs eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._compat import is_fake
from .errors import AOTError


@dataclass(frozen=True)
class _Alias:
    """Input ``index`` is ``base.as_strided(size, stride, offset)`` of the base of group ``group``."""

    index: int
    group: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


@dataclass(frozen=True)
class SyntheticBases:
    """How the primals of the traced graph are made from the caller's primals.

    The traced graph takes ``[primals[i] for i in kept] + [one base per group]``; the base of
    group g is ``primals[groups[g][0]].as_strided((groups[g][2],), (1,), groups[g][1])``
    (a member, storage offset of the base (0), number of elements: up to the last one an alias
    covers).
    """

    num_primals: int
    kept: tuple[int, ...]
    groups: tuple[tuple[int, int, int], ...]
    aliases: tuple[_Alias, ...]

    def graph_args(self, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The traced graph's inputs for the caller's ``args`` (params + inputs)."""
        out = [args[i] for i in self.kept]
        out += [args[m].as_strided((n,), (1,), lo) for m, lo, n in self.groups]
        return out

    def graph_args_fake(self, fakes: Sequence) -> list:
        """``graph_args`` for a symbolic trace: the kept inputs' fakes (symbolic sizes) and one
        fake base per group, static, in the same FakeTensorMode."""
        out = [fakes[i] for i in self.kept]
        mode = next(f.fake_mode for f in fakes if is_fake(f))
        with mode:
            out += [
                torch.empty_strided((n,), (1,), dtype=fakes[m].dtype, device=fakes[m].device)
                for m, _, n in self.groups
            ]
        return out

    def wrap(self, fn):
        """``fn`` (taking the caller's primals) as a function of the traced graph's inputs."""
        kept, aliases, n_kept = self.kept, self.aliases, len(self.kept)

        def with_bases(*graph_args):
            full: list = [None] * self.num_primals
            for i, value in zip(kept, graph_args):
                full[i] = value
            bases = graph_args[n_kept:]
            for a in aliases:
                full[a.index] = bases[a.group].as_strided(a.size, a.stride, a.offset)
            return fn(*full)

        return with_bases


def shared_storage_groups(primals: Sequence) -> list[list[int]]:
    """Indices of tensor primals grouped by storage, for storages that more than one holds.

    The very same tensor twice is one graph input already (capture gives it one placeholder), so
    a group here always means distinct tensors (views, slices) over one storage. A tensor with no
    element shares no memory with any other (nothing is read or written through it), so it is
    in no group: a zero-size output of an earlier graph shares its producer's storage without
    being an autograd view of it (``mutation.output_aliases`` leaves such outputs alone), and
    grouping it would refuse the graph."""
    by_storage: dict[int, list[int]] = {}
    for i, p in enumerate(primals):
        if (
            isinstance(p, torch.Tensor)
            and not is_fake(p)
            and p.layout is torch.strided
            and p.numel() != 0
        ):
            try:
                key = p.untyped_storage()._cdata
            except (RuntimeError, NotImplementedError):  # no storage (a subclass): shares none
                continue
            by_storage.setdefault(key, []).append(i)
    return [g for g in by_storage.values() if len(g) > 1]


def autograd_root(t: torch.Tensor) -> torch.Tensor:
    """The tensor autograd sees ``t`` as a view of (``t._base``), or ``t`` itself."""
    return t._base if t._base is not None else t


def _refuse_unlike_eagers_views(members: Sequence[torch.Tensor]) -> None:
    """Aliases that require grad are traced as views of one base when they are autograd views
    of one tensor (``h`` and ``h[:, 0]``, made by an earlier graph): a write through one, in
    grad mode or not, is then a write into that tensor, which autograd records on it and on
    every view of it, as eager does; the runtime copies the base's new value back with autograd
    recording, into a view of that tensor. Refused (the graph runs eagerly): an alias that does
    not require grad (``h.detach()``: its writes bypass autograd), aliases of two tensors over
    one memory, and views of a leaf that requires grad (a parameter)."""
    roots = {id(autograd_root(m)) for m in members}
    root = autograd_root(members[0])
    if not all(m.requires_grad for m in members) or len(roots) > 1:
        raise AOTError(
            "graph inputs that share a storage are mutated, and not all of them are views "
            "that require grad of one tensor: autograd's rules for them are left to eager"
        )
    if root.is_leaf:
        raise AOTError(
            "graph inputs that share a storage are mutated and are views of a leaf that "
            "requires grad: left to eager"
        )


def has_static_geometry(t) -> bool:
    """Whether tensor ``t`` (a fake under symbolic shapes) has plain-int sizes, strides and
    storage offset."""
    return all(type(v) is int for v in (*t.shape, *t.stride(), t.storage_offset()))


def _extent(t: torch.Tensor) -> tuple[int, int] | None:
    """[first, last + 1) storage element the tensor covers, or None when it has no element."""
    if t.numel() == 0:
        return None
    lo = hi = t.storage_offset()
    for size, stride in zip(t.shape, t.stride()):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    return lo, hi + 1


def synthetic_bases(
    primals: Sequence, groups: Sequence[Sequence[int]], *, grad: bool
) -> SyntheticBases:
    """The SyntheticBases for ``groups`` of aliased ``primals`` (see ``shared_storage_groups``).

    Raises AOTError for what the rebuilt graph could not reproduce: aliases of different dtypes or
    devices, and (``grad``) aliases that require grad (autograd's view and in-place rules)."""
    aliased = {i for g in groups for i in g}
    kept = tuple(i for i in range(len(primals)) if i not in aliased)
    made: list[tuple[int, int, int]] = []
    aliases: list[_Alias] = []
    for group in groups:
        members = [primals[i] for i in group]
        first = members[0]
        if any(m.dtype != first.dtype or m.device != first.device for m in members):
            raise AOTError(
                "graph inputs that share a storage have different dtypes or devices "
                "(a .view(dtype) of another input) and are mutated: only eager can "
                "reproduce the writes"
            )
        if grad and any(m.requires_grad for m in members):
            _refuse_unlike_eagers_views(members)
        # The base starts at the storage's first element: as_strided offsets (and the
        # as_strided_scatter functionalization writes back with) are then the same whether read
        # as absolute or relative to the base.
        hi = max((s[1] for s in (_extent(m) for m in members) if s is not None), default=0)
        for i, m in zip(group, members):
            offset = m.storage_offset() if m.numel() else 0
            aliases.append(_Alias(i, len(made), tuple(m.shape), tuple(m.stride()), offset))
        made.append((group[0], 0, hi))
    return SyntheticBases(len(primals), kept, tuple(made), tuple(aliases))
