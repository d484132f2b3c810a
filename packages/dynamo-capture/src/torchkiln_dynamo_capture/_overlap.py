"""Eager's memory-overlap check of in-place ops, on fake tensors.

Eager refuses an in-place op whose written tensor and one of its inputs share memory without
being the same view (``t = x.unsqueeze(0); t.add_(x)``: "unsupported operation: some elements of
the input tensor and the written-to tensor refer to a single memory location", a RuntimeError
from TensorIterator's ``assert_no_partial_overlap``). Meta functions do not run that check, and
functionalization turns the op into an out-of-place add that never overlaps, so a compiled graph
would return where eager raises. Capture asks this module first and leaves such an op to Python,
where eager raises its own error.

The rule mirrors ATen's ``get_overlap_status``: two tensors with elements, both non-overlapping
and dense, on one storage, whose byte ranges intersect, overlap *partially* unless the ranges are
equal and the strides are the same. Symbolic sizes are read at their values for this call. Equal
ranges with a dim of size 1 count as partial: eager's stride of a size-1 dim is not always the
fake's, so only Python can tell (it runs the op as eager does, raising or not).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

#: the in-place operators a tensor implements (no ``@=``: a tensor's ``a @= b`` rebinds ``a``)
INPLACE_OPERATORS = frozenset(
    {
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.itruediv,
        operator.ifloordiv,
        operator.imod,
        operator.ipow,
        operator.iand,
        operator.ior,
        operator.ixor,
        operator.ilshift,
        operator.irshift,
    }
)


_INPLACE_DUNDERS = {
    f"__i{name}__"
    for name in (
        "add",
        "sub",
        "mul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
    )
}


def _int(v: Any) -> int:
    return int(v.node.hint) if isinstance(v, torch.SymInt) else int(v)


def _dense(t: torch.Tensor) -> bool:
    """ATen's ``is_non_overlapping_and_dense``: some order of the dims makes the strides those
    of a contiguous tensor (dims of size 1 do not count)."""
    dims = sorted((_int(st), _int(sz)) for sz, st in zip(t.shape, t.stride()) if _int(sz) != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def partially_overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """ATen's ``get_overlap_status(a, b) == Partial`` for two (fake) tensors."""
    if a is b or _int(a.numel()) == 0 or _int(b.numel()) == 0:
        return False
    if not (_dense(a) and _dense(b)):
        return False  # ATen's "too hard": no error either
    if StorageWeakRef(a.untyped_storage()) != StorageWeakRef(b.untyped_storage()):
        return False
    a_begin = _int(a.storage_offset()) * a.element_size()
    b_begin = _int(b.storage_offset()) * b.element_size()
    a_end, b_end = (
        a_begin + _int(a.numel()) * a.element_size(),
        b_begin + _int(b.numel()) * b.element_size(),
    )
    if a_begin == b_begin and a_end == b_end:
        if any(_int(n) == 1 for n in (*a.shape, *b.shape)):
            # eager compares every stride, those of size-1 dims too, and a fake view does not
            # always get eager's stride there (``x.reshape(1, -1)`` of a [1, 5] tensor with
            # strides (1, 1): (5, 1) in eager, (1, 1) on fakes): the answer is not knowable
            # here, so the op is left to Python, where eager decides
            return True
        return [_int(s) for s in a.stride()] != [_int(s) for s in b.stride()]
    return a_begin < b_end and b_begin < a_end


def overlaps_itself(t: torch.Tensor) -> bool:
    """ATen's ``has_internal_overlap(t) == Yes``: some elements of ``t`` are one memory location
    (a stride 0 over a dim of size > 1, as ``expand`` makes)."""
    if _dense(t):
        return False
    return any(_int(st) == 0 and _int(sz) > 1 for sz, st in zip(t.shape, t.stride()))


def _written(kind: str, target: Any, args: list, kwargs: dict) -> tuple[torch.Tensor | None, list]:
    """The tensor the call writes (None for an out-of-place call) and its other arguments."""
    inplace_method = (
        kind == "call_method"
        and isinstance(target, str)
        and ((target.endswith("_") and not target.startswith("_")) or target in _INPLACE_DUNDERS)
    )
    if inplace_method or target in INPLACE_OPERATORS:
        written = args[0] if args and isinstance(args[0], torch.Tensor) else None
        return written, list(args[1:]) + list(kwargs.values())
    if isinstance(kwargs.get("out"), torch.Tensor):
        return kwargs["out"], list(args)
    return None, []


def inplace_self_overlap(kind: str, target: Any, args: list, kwargs: dict) -> bool:
    """True when the in-place call writes a tensor whose elements share memory locations
    (``x.expand(3, 3).add_(1)``): eager's TensorIterator refuses most such writes ("more than one
    element of the written-to tensor refers to a single memory location"), functionalization
    would compute them."""
    written, _ = _written(kind, target, args, kwargs)
    return written is not None and _int(written.numel()) > 0 and overlaps_itself(written)


def inplace_partial_overlap(kind: str, target: Any, args: list, kwargs: dict) -> bool:
    """True when eager would refuse the in-place call ``target(*args, **kwargs)`` (fake
    arguments) for an input that partially overlaps the tensor it writes."""
    written, others = _written(kind, target, args, kwargs)
    if written is None:
        return False
    return any(isinstance(o, torch.Tensor) and partially_overlaps(written, o) for o in others)


__all__ = [
    "inplace_partial_overlap",
    "inplace_self_overlap",
    "overlaps_itself",
    "partially_overlaps",
]
