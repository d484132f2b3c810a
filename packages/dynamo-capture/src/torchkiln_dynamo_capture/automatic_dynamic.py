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
Only the frame's own arguments count, not ints read from objects (module settings, flags).
"""

from __future__ import annotations

import torch
from torchkiln_guards import (
    CompiledGuards,
    ConstantMatch,
    ItemSource,
    LocalSource,
    Source,
    TensorMatch,
)

from ._guards import ValueEqualsMatch


def _argument_int_sizes(g) -> tuple[Source, tuple[int, ...]] | None:
    """(source, sizes) of a guard pinning a frame argument's int or torch.Size by value."""
    if not isinstance(g, (ConstantMatch, ValueEqualsMatch)):
        return None
    source = g.source
    # an argument, or an item of one (a tuple of sizes)
    if not isinstance(source.source if isinstance(source, ItemSource) else source, LocalSource):
        return None
    value = g.value
    if type(value) is int:
        return source, (value,)
    if type(value) is torch.Size:
        return source, tuple(value)
    return None


class SizeHistory:
    """The first captured sizes of each input tensor of one captured function, by source
    expression; a dim that has changed is ``None`` from then on (and stays symbolic)."""

    def __init__(self) -> None:
        self._sizes: dict[str, tuple[Source, tuple[int | None, ...]]] = {}

    def record(self, guards: CompiledGuards) -> None:
        """Remember the sizes of the tensors a new cache entry matched (the first seen per source)."""
        for g in guards.guards:
            if isinstance(g, TensorMatch):
                self._sizes.setdefault(g.source.expr(), (g.source, g.sizes))
            elif (found := _argument_int_sizes(g)) is not None:
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
            dims = frozenset(d for d, (was, size) in enumerate(zip(sizes, now_sizes)) if was is None or was != size)
            if dims:
                changed[expr] = dims
                self._sizes[expr] = (src, tuple(None if d in dims else s for d, s in enumerate(sizes)))
        return changed
