"""Automatic dynamic shapes (``dynamic=None``): which input dims changed size since first captured.

TorchDynamo keeps, per frame, the sizes every input tensor had when it was first captured, by
source, and a recompile makes the dims that changed symbolic. The sources are all of them, not only
the arguments: a tensor reached through an attribute or a container (a key/value cache's
``L['kwargs']['cache'].layers[0].keys``, which grows by one each decoding step) is an input too.
Without that, a cache that grows recompiles once per step until the recompile limit.
"""

from __future__ import annotations

import torch
from torchkiln_guards import CompiledGuards, Source, TensorMatch


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

    def changed_dims(self, guards: CompiledGuards, args, kwargs) -> dict[str, frozenset[int]]:
        """``{"L['x']": dims}``: the dims of each remembered input whose size in this call differs
        from the remembered one (or changed before). ``guards`` reads the sources in this call."""
        if not self._sizes:
            return {}
        values = guards.read([src for src, _ in self._sizes.values()], *args, **kwargs)
        changed: dict[str, frozenset[int]] = {}
        for expr, (src, sizes) in list(self._sizes.items()):
            now = values.get(src)
            if not isinstance(now, torch.Tensor) or now.dim() != len(sizes):
                continue  # gone, or of another rank: a new specialisation, not a growing size
            dims = frozenset(d for d, (was, size) in enumerate(zip(sizes, now.shape)) if was is None or was != size)
            if dims:
                changed[expr] = dims
                self._sizes[expr] = (src, tuple(None if d in dims else s for d, s in enumerate(sizes)))
        return changed
