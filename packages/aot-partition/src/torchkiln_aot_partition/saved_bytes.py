"""How many bytes a training graph keeps from its forward for its backward, eager or compiled.

Peak training memory is parameters + gradients + what the forward saves for the backward (and
the backward's own temporaries). ``saved_tensor_bytes`` counts the third part the way autograd
sees it: every tensor saved for backward while ``fn`` runs (``torch.autograd.graph.
saved_tensors_hooks``: eager's saved tensors and a compiled graph's ``save_for_backward`` alike),
deduplicated by storage (a tensor and its views are one), split into storages the caller holds
anyway (parameters, the batch: ``held``) and new ones (activations). ``partition_saved_bytes``
reads the same figure from a compiled training runtime's min-cut, without running it, and
``saved_activation_bytes`` evaluates it for given inputs (symbolic sizes at their real values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .partition import PartitionStats


@dataclass(frozen=True)
class SavedBytes:
    """Saved-for-backward storages: ``activations`` bytes made by the forward, ``held`` bytes of
    storages the caller holds anyway (parameters, inputs), ``storages`` how many in all."""

    activations: int
    held: int
    storages: int


def _storage(t: torch.Tensor) -> Any:
    return t.untyped_storage()


def saved_tensor_bytes(
    fn: Callable[..., Any], *args: Any, held: Iterable[torch.Tensor] = ()
) -> tuple[Any, SavedBytes]:
    """Run ``fn(*args)`` and count the tensors autograd saves for its backward; returns (its
    result, the ``SavedBytes``). ``held``: tensors the caller keeps alive anyway (parameters,
    the batch), whose storages are counted apart. Run it after the first (compiling) call: while
    a graph is traced, saved tensors are fakes with no storage."""
    held_ptrs = {_storage(t).data_ptr() for t in held if isinstance(t, torch.Tensor)}
    seen: dict[int, tuple[int, bool]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = _storage(t)
        ptr = storage.data_ptr()
        seen[ptr] = (storage.nbytes(), ptr in held_ptrs)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    activations = sum(n for n, is_held in seen.values() if not is_held)
    kept = sum(n for n, is_held in seen.values() if is_held)
    return out, SavedBytes(activations, kept, len(seen))


def partition_saved_bytes(compiled: Any) -> PartitionStats | None:
    """The min-cut's ``PartitionStats`` of a runtime ``aot_compile`` returned for training (its
    ``activation_bytes``: what the forward saves beyond primals), or None for an inference
    runtime. A runtime rebuilt from a cache keeps the figures of the partition that made it
    (``RuntimeMetadata.partition``); an entry stored before they were kept has None."""
    plan = getattr(compiled, "plan", None)
    return getattr(plan, "partition", None)


def saved_activation_bytes(compiled: Any, inputs: Sequence[Any]) -> int | None:
    """Bytes a training runtime's forward saves for its backward beyond what the caller holds
    (``PartitionStats.activation_bytes``) when called on ``inputs``: a graph with symbolic sizes
    has them evaluated at these inputs' sizes. None for an inference runtime (nothing saved)."""
    stats = partition_saved_bytes(compiled)
    if stats is None:
        return None
    args = [*getattr(compiled, "params", ()), *inputs]
    bases = getattr(compiled, "bases", None)
    primals = bases.graph_args(args) if bases is not None else args
    return stats.activation_bytes_at(primals)
