"""The one place that absorbs differences between the torch versions we support (2.11, 2.13)."""

from __future__ import annotations

import torch


def default_decompositions() -> dict:
    """torch's core-ATen decomposition table as a plain dict.

    `core_aten_decompositions()` returns a dict in older torch and a lazily materialised
    `CustomDecompTable` (a dict subclass, or a callable in some builds) in newer ones.
    """
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = as_decomposition_dict(core_aten_decompositions())
    # Batch norm's functional training form is not in the core table; decompose it too so the
    # default graphs hold only core ATen ops.
    aten = torch.ops.aten
    for op in (
        aten._native_batch_norm_legit_functional.default,
        aten._native_batch_norm_legit.no_stats,
    ):
        if op in decomposition_table:
            table.setdefault(op, decomposition_table[op])
    return table


def as_decomposition_dict(table) -> dict:
    """Normalise a caller's decomposition table (dict, dict-like, or zero-arg callable) to a dict."""
    if table is None:
        return {}
    if callable(table) and not hasattr(table, "items"):
        table = table()
    return dict(table.items())


def numel_hint(val) -> int | None:
    """A (fake) tensor's element count; a symbolic count read at its hint, None when unbacked."""
    numel = val.numel()
    if isinstance(numel, int):
        return numel
    # the size seen at trace time, read without a guard: int(numel) would specialize the
    # symbolic size (and recompile the graph for every other size)
    hint = getattr(getattr(numel, "node", None), "hint", None)
    return int(hint) if hint is not None else None


def tensor_nbytes(val) -> int:
    """Bytes a (fake) tensor's values occupy; symbolic sizes fall back to their hint."""
    numel = numel_hint(val)
    if numel is None:
        numel = 1 << 20  # unbacked: assume large, not cheap to save
    return numel * val.element_size()


def is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def has_metadata_mutation(t: torch.Tensor) -> bool:
    """Whether functional tensor ``t`` (an input inside torch.func.functionalize) had its sizes or
    strides changed in place; False where this torch cannot tell."""
    query = getattr(torch, "_functionalize_has_metadata_mutation", None)
    if query is None:  # pragma: no cover - every torch we support has it
        return False
    try:
        return bool(query(t))
    except RuntimeError:  # not a functional tensor (a non-tensor input passed through)
        return False


__all__ = [
    "as_decomposition_dict",
    "default_decompositions",
    "has_metadata_mutation",
    "is_fake",
    "numel_hint",
    "tensor_nbytes",
    "torch",
]
