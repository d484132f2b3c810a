"""Applying a functional graph's input mutations back to the user's tensors.

A functionalized graph cannot mutate its inputs; it returns their new values instead
(FunctionalGraph.mutated_inputs says which input each belongs to). After the compiled graph runs,
we copy_ each new value into the user's tensor, so `x.add_(1)` inside the graph mutates x and
batch norm's running statistics update as in eager.

Aliasing: an output that in eager is an input, or a view of one, is rebuilt at run time from the
user's input (the input itself, or as_strided with eager's geometry, found by a fake run), after
mutations are copied back, so it shares storage as in eager. Outputs that are views of another
output (``t = x * 2; return t, t[1:]``, and the values a graph break hands on) are rebuilt as
views of that output, so a later write through one is seen through the other; when no output
holds their whole storage (only slices of an intermediate are returned), aot_compile has the
graph return the intermediate as a hidden output to rebuild them from (view_bases.py); when even
that is impossible, the graph is refused (AOTError: it runs eagerly) rather than return unrelated
tensors. Under symbolic shapes the
geometry is found again for each new input geometry (ShapeDependentAliases).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .errors import AOTError, MutationAppliedError


@dataclass
class WriteBackCounts:
    """How the runtimes applied input mutations, since the process started: ``copies`` (a
    ``copy_`` each, one device copy) and ``in_place`` (the compiled graph had written the new
    value into the input itself). Tests and benchmarks read the difference around a call."""

    copies: int = 0
    in_place: int = 0


#: the process's counts (plain integer additions: cheap enough to keep on every call)
WRITE_BACK = WriteBackCounts()


def apply_mutations(
    args: Sequence[torch.Tensor],
    mutated_inputs: Sequence[int],
    new_values: Sequence[torch.Tensor],
    with_grad: Sequence[int] = (),
) -> None:
    """args[i].copy_(value) for each mutated input i, without recording autograd history but for
    the inputs in ``with_grad`` (written in grad mode, their new values carry a gradient: the copy
    is recorded, so the input's ``grad_fn`` leads to the value's, as after eager's write).

    A new value that is the input itself (the compiled graph wrote it in place, see
    ``in_place_mutations``) needs no copy: the input's version counter is bumped instead, as the
    copy would have. All or nothing: every copy is checked (shape, device) and a new value that
    shares memory with an input is cloned before the first input is written, so what can fail
    fails before any input changed (unless the graph already wrote some in place: then, as for a
    failure while writing, MutationAppliedError says some inputs may hold their new values and
    the call must not be repeated)."""
    if not mutated_inputs:
        return
    pairs = []
    written = []
    with torch.no_grad():
        try:
            for i, value in zip(mutated_inputs, new_values):
                dst = args[i]
                if _is_written(value, dst):
                    written.append(dst)
                    continue
                if value.shape != dst.shape or value.device != dst.device:
                    raise AOTError(
                        f"the new value of mutated graph input {i} has shape "
                        f"{tuple(value.shape)} on {value.device}, the input "
                        f"{tuple(dst.shape)} on {dst.device}"
                    )
                if _overlaps_itself(dst):
                    raise AOTError(
                        f"mutated graph input {i} has elements that share one memory location "
                        "(an expanded tensor); eager refuses to write it too"
                    )
                if any(_shares_memory(value, args[j]) for j in mutated_inputs):
                    # writing one input must not change another's new value
                    with torch.set_grad_enabled(i in with_grad):
                        value = value.clone()
                pairs.append((dst, value, i in with_grad))
        except AOTError as exc:
            if not written:
                raise
            raise MutationAppliedError(
                f"the compiled graph wrote mutated inputs in place, then {exc}"
            ) from exc
        if written:
            torch._C._increment_version(written)  # as copy_ would: autograd's saved-tensor checks
            WRITE_BACK.in_place += len(written)
        try:
            for dst, value, grad in pairs:
                if grad:
                    with torch.enable_grad():
                        dst.copy_(value)
                else:
                    dst.copy_(value)
        except Exception as exc:
            raise MutationAppliedError(
                f"writing the mutated graph inputs back failed part way "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        WRITE_BACK.copies += len(pairs)


def _is_written(value: torch.Tensor, dst: torch.Tensor) -> bool:
    """``value`` is ``dst`` (the inference graph returned the input) or the same memory with the
    same geometry (autograd.Function hands an input it returns back as a view of itself): a copy
    would change nothing."""
    if value is dst:
        return True
    try:
        return (
            value.data_ptr() == dst.data_ptr()
            and value.dtype == dst.dtype
            and value.device == dst.device
            and value.shape == dst.shape
            and value.stride() == dst.stride()
        )
    except RuntimeError:  # a tensor without storage (a wrapper subclass): copied as before
        return False


def in_place_mutations(
    gm: torch.fx.GraphModule,
    graph_inputs: Sequence[Any],
    mutated_inputs: Sequence[int],
    first_output: int,
    aliases: Any,
) -> tuple[tuple[int, int], ...]:
    """The (output position, input position) pairs of ``gm``'s mutated inputs its compiler may
    write in place (contract C2's ``gm.meta["mutations_in_place"]``): the input is a tensor that
    does not require grad and has no element twice (an expanded tensor), no output of the graph
    is in eager the input or a view of it, the new value (output ``first_output + j`` for
    ``mutated_inputs[j]``) is returned at that position only (not also a user output or a saved
    value), with the input's dtype, device and size. Inputs that share a storage are traced over
    synthetic bases (aliasing.py): the caller asks for none then."""
    if isinstance(aliases, ShapeDependentAliases):
        return ()
    aliased = {a.input for a in aliases if not a.of_output}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    pairs = []
    for j, i in enumerate(mutated_inputs):
        k = first_output + j
        arg = graph_inputs[i] if i < len(graph_inputs) else None
        node = outs[k] if k < len(outs) else None
        if (
            not isinstance(arg, torch.Tensor)
            or arg.requires_grad
            or i in aliased
            or not isinstance(node, torch.fx.Node)
            or sum(o is node for o in outs) != 1
            or i >= len(placeholders)
        ):
            continue
        new, old = node.meta.get("val"), placeholders[i].meta.get("val")
        if (
            isinstance(new, torch.Tensor)
            and isinstance(old, torch.Tensor)
            and new.dtype == old.dtype
            and new.device == old.device
            and len(new.shape) == len(old.shape)
            and all(statically_known_true(a == b) for a, b in zip(new.shape, old.shape))
            and not _overlaps_itself(arg)
        ):
            pairs.append((k, i))
    return tuple(pairs)


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
    """Graph output `output` is, in eager, the input `input` itself or a view of it with this
    geometry; with `of_output`, a view of graph output `input` (which is its whole storage)."""

    output: int
    input: int
    is_input: bool
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    of_output: bool = False
    base_stride: tuple[int, ...] = ()  # with of_output: the strides output `input` has in eager


def find_output_aliases(fn, args: Sequence[torch.Tensor]) -> tuple[OutputAlias, ...]:
    """Which outputs of fn(*args) alias an input or another output, with eager's geometry for
    these inputs, found by one run on fake copies of them (see ShapeDependentAliases for
    symbolic shapes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    try:
        # a ShapeEnv (with static sizes) as make_fx has one: while_loop's fake run asks for it
        with FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True) as mode, torch.no_grad():
            fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            outs = fn(*fakes)
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return ()  # best effort: the ATen trace reports real problems with a better message
    return with_eager_size_one_strides(fn, args, output_aliases(fakes, outs))


def attribute_to_viewed_inputs(
    gm: torch.fx.GraphModule, args: Sequence[Any], aliases: tuple[OutputAlias, ...]
) -> tuple[OutputAlias, ...]:
    """``aliases`` with each view of an input attributed to the input the graph viewed, where
    several inputs share its storage (BLOOM's and Mamba's ``B`` and ``C``, two slices of one
    projection): the storage alone named the first of them, and the runtime rebuilt the output
    as a view of that one, so its gradient reached the wrong slice and the rest was lost. The
    graph is run once on fakes; from the output, each step goes to the argument whose value
    shares the storage, until a placeholder."""
    from torch.multiprocessing.reductions import StorageWeakRef

    refs = {
        i: StorageWeakRef(a.untyped_storage())
        for i, a in enumerate(args)
        if isinstance(a, torch.Tensor)
    }
    counts = collections.Counter(refs.values())
    shared = {i for i, ref in refs.items() if counts[ref] > 1}
    if not any(a.input in shared and not a.of_output for a in aliases):
        return aliases
    values = _fake_values(gm, args)
    if values is None:
        return aliases
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    results = output.args[0] if isinstance(output.args[0], (tuple, list)) else (output.args[0],)
    fixed = []
    for a in aliases:
        if a.input in shared and not a.of_output and a.output < len(results):
            j = _viewed_placeholder(results[a.output], values, placeholders)
            if j is not None and j in shared and j != a.input:
                same = values.get(results[a.output]) is values.get(placeholders[j])
                a = dataclasses.replace(a, input=j, is_input=same)
        fixed.append(a)
    return tuple(fixed)


def _fake_values(gm: torch.fx.GraphModule, args: Sequence[Any]) -> dict | None:
    """Every node's value in one run of ``gm`` on fake copies of ``args`` (None if it fails)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    values: dict = {}

    class Recording(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = result = super().run_node(n)
            return result

    try:
        with FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True) as mode, torch.no_grad():
            fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
            Recording(gm).run(*fakes)
    except Exception:  # noqa: BLE001 - best effort: the storage's first input stays
        return None
    return values


def _viewed_placeholder(node: Any, values: dict, placeholders: list) -> int | None:
    """The position of the placeholder ``node`` is a chain of views of (each step an argument
    sharing the node's storage), or None."""
    from torch.multiprocessing.reductions import StorageWeakRef

    while isinstance(node, torch.fx.Node):  # each step goes to an earlier node: it ends
        if node.op == "placeholder":
            return placeholders.index(node)
        value = values.get(node)
        if not isinstance(value, torch.Tensor):
            return None
        ref = StorageWeakRef(value.untyped_storage())
        flat: list = []
        torch.fx.node.map_arg((node.args, node.kwargs), flat.append)
        node = next(
            (
                arg
                for arg in flat
                if isinstance(values.get(arg), torch.Tensor)
                and StorageWeakRef(values[arg].untyped_storage()) == ref
            ),
            None,
        )
    return None


def with_eager_size_one_strides(
    fn, args: Sequence[Any], aliases: tuple[OutputAlias, ...]
) -> tuple[OutputAlias, ...]:
    """``aliases`` with eager's strides on the dims of size 1 of each view of an input or of
    another output.

    A fake tensor's ``view`` computes those strides in Python, not always as eager's C++ does
    (a [1, 5] tensor with strides (1, 1) viewed as [1, 5]: (1, 1) on fakes, (5, 1) in eager).
    They address no memory, but eager's in-place ops compare them (its overlap check raised for
    ``t = x.reshape(1, -1); t.add_(x)`` after a graph break handed ``t`` on, and the rebuilt
    view let it pass; the same for views of an intermediate, ``t = (x - 2)[1:2]``). Meta
    tensors run eager's C++ view code: one run on meta copies of the inputs gives the strides;
    any failure (data-dependent ops) keeps the fake ones."""
    wanted = [a for a in aliases if not a.is_input and 1 in a.size]
    if not wanted:
        return aliases
    try:
        with torch.no_grad():
            metas = [_meta_copy(a) if isinstance(a, torch.Tensor) else a for a in args]
            outs = fn(*metas)
    except Exception:  # noqa: BLE001 - best effort: the fake strides address the same memory
        return aliases
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    fixed = []
    for a in aliases:
        out = outs[a.output] if a in wanted and a.output < len(outs) else None
        if (
            isinstance(out, torch.Tensor)
            and tuple(out.shape) == a.size
            and out.storage_offset() == a.storage_offset
            and all(n == 1 or int(st) == s for n, st, s in zip(a.size, out.stride(), a.stride))
        ):
            a = dataclasses.replace(a, stride=tuple(int(st) for st in out.stride()))
        fixed.append(a)
    return tuple(fixed)


def _meta_copy(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s dtype and geometry (sizes, strides, storage offset)."""
    extent = (
        t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0) + 1
    )
    storage = torch.empty(extent, dtype=t.dtype, device="meta")
    return storage.as_strided(t.shape, t.stride(), t.storage_offset())


def output_aliases(fakes: Sequence[Any], outs: Any) -> tuple[OutputAlias, ...]:
    """The aliases ``find_output_aliases`` finds, from a fake run already made: ``outs`` =
    fn(*fakes), with static sizes (the joint trace's own fake run serves, see joint.py)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    storages = {}
    for i, f in enumerate(fakes):
        if isinstance(f, torch.Tensor):
            storages.setdefault(StorageWeakRef(f.untyped_storage()), i)
    aliases = []
    intermediates: dict[StorageWeakRef, list[int]] = {}
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            continue
        ref = StorageWeakRef(out.untyped_storage())
        i = storages.get(ref)
        if i is None:
            # no element, nothing shared (its strides are arbitrary); a size read from the data
            # (.item()) is not known to be 0
            if not statically_known_true(out.numel() == 0):
                intermediates.setdefault(ref, []).append(k)
            continue
        aliases.append(OutputAlias(k, i, out is fakes[i], *_geometry(out)))
    for group in intermediates.values():
        aliases += _views_of_an_output([outs[k] for k in group], group)
    return tuple(aliases)


class ShapeDependentAliases:
    """Output aliases of a graph with symbolic shapes: the geometry of a view depends on the
    sizes, so it is found again (``find_output_aliases``, a fake run) for each new geometry of
    the inputs, and kept."""

    def __init__(self, fn) -> None:
        self.fn = fn
        self._known: dict[tuple, tuple[OutputAlias, ...]] = {}

    def __call__(self, args: Sequence[Any]) -> tuple[OutputAlias, ...]:
        key = tuple(
            (tuple(a.shape), a.stride(), a.storage_offset(), a.dtype)
            if isinstance(a, torch.Tensor)
            else a
            for a in args
        )
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = find_output_aliases(self.fn, args)
        return found


def _geometry(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


def _views_of_an_output(outs: list[torch.Tensor], positions: list[int]) -> list[OutputAlias]:
    """Outputs (at ``positions``) sharing one intermediate's storage: the others as views of the
    one that is that whole storage, dense (the compiled graph returns it with eager's strides)."""
    if len({id(o) for o in outs}) == 1:
        return []  # one tensor returned twice, nothing else on its storage
    whole = [(j, o) for j, o in zip(positions, outs) if holds_whole_storage(o)]
    if not whole:
        raise AOTError(
            "graph outputs are views of an intermediate that is not itself an output "
            "(they would come back as unrelated tensors)"
        )
    base, tensor = whole[0]
    return [
        OutputAlias(
            k, base, False, *_geometry(o), of_output=True, base_stride=tuple(tensor.stride())
        )
        for k, o in zip(positions, outs)
        if k != base
    ]


def holds_whole_storage(t: torch.Tensor) -> bool:
    """t is its storage: from offset 0, every element once, no gap, nothing past its end."""
    return (
        t.storage_offset() == 0
        and _dense(t)
        and t.numel() * t.element_size() == t.untyped_storage().nbytes()
    )


def _dense(t: torch.Tensor) -> bool:
    """Some order of the dims gives contiguous strides (dims of size 1 aside): no gaps, no
    element twice."""
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def restore_aliases(
    outs: list, args: Sequence[torch.Tensor], aliases: Sequence[OutputAlias] | ShapeDependentAliases
) -> list:
    """Replace each aliased output by the input itself or a view of it (or a view of another
    output), as eager returns."""
    if isinstance(aliases, ShapeDependentAliases):
        aliases = aliases(args)
    for a in aliases:
        if a.of_output:
            base = outs[a.input]
            if tuple(base.stride()) != a.base_stride or base.storage_offset() != 0:
                # the compiled graph chose other strides for it (same values): give it eager's,
                # which the views' geometry is written in
                fixed = base.new_empty_strided(base.shape, a.base_stride)
                fixed.copy_(base)
                outs[a.input] = base = fixed
        else:
            base = args[a.input]
        outs[a.output] = base if a.is_input else base.as_strided(a.size, a.stride, a.storage_offset)
    return outs
