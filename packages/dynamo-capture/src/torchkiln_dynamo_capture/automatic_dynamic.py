"""Automatic dynamic shapes (``dynamic=None``): which input dims changed size since first captured.

TorchDynamo keeps, per frame, the sizes every input tensor had when it was first captured, by
source, and a recompile makes the dims that changed symbolic. The sources are all of them, not only
the arguments: a tensor reached through an attribute or a container (a key/value cache's
``L['kwargs']['cache'].layers[0].keys``, which grows by one each decoding step) is an input too.
Without that, a cache that grows recompiles once per step until the recompile limit.

Ints are sizes too: an int argument of the frame and a ``torch.Size`` argument (what a graph break
hands its continuation: ``s = x.shape`` read before the break) are remembered by value, and one
that changed becomes a symbolic graph input at the recompile (dim 0 of an int, each changed
element of a size), as TorchDynamo's automatic dynamic shapes make a changed int input dynamic.
Besides the frame's own arguments, an int attribute of a plain object (not an ``nn.Module``) the
frame reads counts too, as in TorchDynamo (whose module attributes specialize): a static
key/value cache's ``max_cache_len`` differs per prompt length, and the prefill that allocates the
cache recompiled for each new prompt length. Module settings and flags stay constants.
"""

from __future__ import annotations

import torch
from torchkiln_guards import (
    AttrSource,
    CompiledGuards,
    ConstantMatch,
    ItemSource,
    LocalSource,
    Source,
    TensorMatch,
    TypeMatch,
)

from ._guards import ValueEqualsMatch


def _argument_int_sizes(g, owners: dict[str, type]) -> tuple[Source, tuple[int, ...]] | None:
    """(source, sizes) of a guard pinning a frame argument's int or torch.Size by value, or an
    int attribute of a plain object (``owners``: source expression -> type, of the objects the
    entry's guards pin by type)."""
    if not isinstance(g, (ConstantMatch, ValueEqualsMatch)):
        return None
    source = g.source
    value = g.value
    if type(value) is int and isinstance(source, AttrSource):
        owner = owners.get(source.source.expr())
        return (
            (source, (value,))
            if owner is not None and not issubclass(owner, torch.nn.Module)
            else None
        )
    # an argument, or an item of one at any depth (a tuple of sizes, a list of lists of ints)
    if not isinstance(_root(source), LocalSource):
        return None
    if type(value) is int:
        return source, (value,)
    if type(value) is torch.Size:
        return source, tuple(value)
    return None


def _root(source: Source) -> Source:
    """The argument an item source reads from (``L['s']`` for ``L['s'][0][2]``)."""
    while isinstance(source, ItemSource):
        source = source.source
    return source


class EveryDim(dict):
    """``dynamic=True`` after a recompile: every tensor dim symbolic, and ``{"L['n']": {0}}`` for
    the ints that changed since first captured (``dynamic=True`` leaves ints constant at first,
    a size being what it makes symbolic; an int that keeps changing, such as a static cache's
    length, would otherwise recompile per value)."""


class SizeHistory:
    """The first captured sizes of each input tensor of one captured function, by source
    expression; a dim that has changed is ``None`` from then on (and stays symbolic)."""

    def __init__(self) -> None:
        self._sizes: dict[str, tuple[Source, tuple[int | None, ...]]] = {}

    def record(self, guards: CompiledGuards) -> None:
        """Remember the sizes of the tensors a new cache entry matched (the first seen per source)."""
        owners = {g.source.expr(): g.type_ for g in guards.guards if isinstance(g, TypeMatch)}
        for g in guards.guards:
            if isinstance(g, TensorMatch):
                self._sizes.setdefault(g.source.expr(), (g.source, g.sizes))
            elif (found := _argument_int_sizes(g, owners)) is not None:
                self._sizes.setdefault(found[0].expr(), found)

    def changed_dims(self, guards: CompiledGuards, args, kwargs) -> dict[str, frozenset[int]]:
        """``{"L['x']": dims}``: the dims of each remembered input whose size in this call differs
        from the remembered one (or changed before). ``guards`` reads the sources in this call."""
        if not self._sizes:
            return {}
        values = guards.read([src for src, _ in self._sizes.values()], *args, **kwargs)
        changed: dict[str, frozenset[int]] = {}
        for expr, (src, sizes) in list(self._sizes.items()):
            now = values.get(src)
            if type(now) is int:
                now_sizes: tuple = (now,)
            elif type(now) is torch.Size:
                now_sizes = tuple(now)
            elif isinstance(now, torch.Tensor):
                now_sizes = tuple(now.shape)
            else:
                continue  # gone, or another kind of value: a new specialisation
            if len(now_sizes) != len(sizes):
                continue  # of another rank: a new specialisation, not a growing size
            dims = frozenset(
                d
                for d, (was, size) in enumerate(zip(sizes, now_sizes))
                if was is None or was != size
            )
            if dims:
                changed[expr] = dims
                self._sizes[expr] = (
                    src,
                    tuple(None if d in dims else s for d, s in enumerate(sizes)),
                )
        # the ints of one list or tuple argument change as a whole: a list read out of a tensor
        # (``.tolist()`` handed to a continuation) holds data, and marking only the items seen
        # changing (TorchDynamo's per-source rule) recompiles again for each item first seen
        # changing later, up to the recompile limit for a long list
        roots = {
            _root(self._sizes[e][0]).expr()
            for e in changed
            if isinstance(self._sizes[e][0], ItemSource)
        }
        for expr, (src, sizes) in list(self._sizes.items()):
            if (
                expr not in changed
                and isinstance(src, ItemSource)
                and len(sizes) == 1
                and _root(src).expr() in roots
            ):
                changed[expr] = frozenset({0})
                self._sizes[expr] = (src, (None,))
        return changed
