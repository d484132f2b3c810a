"""Applying a functional graph's input mutations back to the user's tensors.

A functionalized graph cannot mutate its inputs; it returns their new values instead
(FunctionalGraph.mutated_inputs says which input each belongs to). After the compiled graph runs,
we copy_ each new value into the user's tensor, so `x.add_(1)` inside the graph mutates x and
batch norm's running statistics update as in eager.

Aliasing: an output that in eager is an input, or a view of one, is rebuilt at run time from the
user's input (the input itself, or as_strided with eager's geometry, found by a fake run), after
mutations are copied back, so it shares storage as in eager. Outputs aliasing other outputs, and
aliases under symbolic shapes, are fresh tensors with the right values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .errors import AOTError, MutationAppliedError


def apply_mutations(args: Sequence[torch.Tensor], mutated_inputs: Sequence[int],
                    new_values: Sequence[torch.Tensor]) -> None:
    """args[i].copy_(value) for each mutated input i, without recording autograd history.

    All or nothing: every copy is checked (shape, device) and a new value that shares memory
    with an input is cloned before the first input is written, so what can fail fails before any
    input changed. A failure while writing raises MutationAppliedError (some inputs may hold their
    new values: the call must not be repeated)."""
    pairs = []
    with torch.no_grad():
        for i, value in zip(mutated_inputs, new_values):
            dst = args[i]
            if value.shape != dst.shape or value.device != dst.device:
                raise AOTError(f"the new value of mutated graph input {i} has shape {tuple(value.shape)} on "
                               f"{value.device}, the input {tuple(dst.shape)} on {dst.device}")
            if _overlaps_itself(dst):
                raise AOTError(f"mutated graph input {i} has elements that share one memory location "
                               "(an expanded tensor); eager refuses to write it too")
            if any(_shares_memory(value, args[j]) for j in mutated_inputs):
                value = value.clone()  # writing one input must not change another's new value
            pairs.append((dst, value))
        try:
            for dst, value in pairs:
                dst.copy_(value)
        except Exception as exc:
            raise MutationAppliedError(f"writing the mutated graph inputs back failed part way "
                                       f"({type(exc).__name__}: {exc})") from exc


def _overlaps_itself(t: torch.Tensor) -> bool:
    # 1 is "yes" (0 "no", 2 "too hard to tell": copy_ then decides, as in eager)
    return torch._debug_has_internal_overlap(t) == 1


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.untyped_storage()._cdata == b.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # no storage: nothing shared
        return False


@dataclass(frozen=True)
class OutputAlias:
    """Graph output `output` is, in eager, the input `input` itself or a view of it with this geometry."""

    output: int
    input: int
    is_input: bool
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int


def find_output_aliases(fn, args: Sequence[torch.Tensor]) -> tuple[OutputAlias, ...]:
    """Which outputs of fn(*args) alias an input, found by one run on fake copies (static shapes).

    Returns () when any size is symbolic: the geometry would not hold for other sizes.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        # a ShapeEnv (with static sizes) as make_fx has one: while_loop's fake run asks for it
        with FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True) as mode, torch.no_grad():
            fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            outs = fn(*fakes)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return ()  # best effort: the ATen trace reports real problems with a better message
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    storages = {}
    for i, f in enumerate(fakes):
        if isinstance(f, torch.Tensor):
            storages.setdefault(StorageWeakRef(f.untyped_storage()), i)
    aliases = []
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            continue
        i = storages.get(StorageWeakRef(out.untyped_storage()))
        if i is None:
            continue
        geometry = (tuple(out.shape), tuple(out.stride()), out.storage_offset())
        if not all(isinstance(v, int) for v in geometry[0] + geometry[1] + (geometry[2],)):
            return ()
        aliases.append(OutputAlias(k, i, out is fakes[i], *geometry))
    return tuple(aliases)


def restore_aliases(outs: list, args: Sequence[torch.Tensor], aliases: Sequence[OutputAlias]) -> list:
    """Replace each aliased output by the input itself or a view of it, as eager returns."""
    for a in aliases:
        base = args[a.input]
        outs[a.output] = base if a.is_input else base.as_strided(a.size, a.stride, a.storage_offset)
    return outs
