"""The callables aot_compile returns: an inference wrapper and an autograd.Function for training."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .aliasing import SyntheticBases, autograd_root
from .errors import DoubleBackwardUnsupported, MutationAppliedError
from .freezing import FoldedConstants
from .mutation import OutputAlias, ShapeDependentAliases, apply_mutations, restore_aliases
from .tangents import CannotSpecialise, without_tangents
from .trace import merge_constant_outputs


@dataclass(frozen=True)
class InferenceRuntime:
    """Calls the compiled ATen graph with [params..., inputs...] and copies back input mutations."""

    compiled: Callable[..., Sequence[torch.Tensor]]
    params: tuple[torch.Tensor, ...]
    num_user_outputs: int
    mutated_inputs: tuple[int, ...]
    constant_outputs: tuple[tuple[int, Any], ...] = ()
    aliases: tuple[OutputAlias, ...] | ShapeDependentAliases = ()
    bases: SyntheticBases | None = None
    #: frozen parameters' folded constants (freezing.py), passed after the graph's own inputs
    folded: FoldedConstants | None = None
    #: the last user outputs are intermediates views are rebuilt from (view_bases.py), not returned
    hidden_outputs: int = 0

    def refresh_folded(self) -> None:
        """Refold the frozen parameters' constants, in place, if a parameter changed: a caller
        that replays the compiled graph without calling the runtime (a CUDA graph) calls this
        first."""
        if self.folded is not None:
            self.folded.values(self.params)  # folding reads parameters only (positions < params)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        args = [*self.params, *inputs]
        graph_args = self.bases.graph_args(args) if self.bases is not None else args
        # grad mode switched directly, not through torch.no_grad(): its context manager objects
        # were a fifth of a tiny compiled call's Python time (benchmarks/cpu_overhead.py)
        grad = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            if self.folded is not None:
                outs = list(self.compiled(*graph_args, *self.folded.values(graph_args)))
            else:
                outs = list(self.compiled(*graph_args))
        except Exception as exc:
            _raise_if_written(exc)
            raise
        finally:
            torch._C._set_grad_enabled(grad)
        if not (
            self.mutated_inputs or self.aliases or self.constant_outputs or self.hidden_outputs
        ):
            return outs if len(outs) == self.num_user_outputs else outs[: self.num_user_outputs]
        apply_mutations(graph_args, self.mutated_inputs, outs[self.num_user_outputs :])
        with _after_write_back(self.mutated_inputs):
            outs = restore_aliases(outs[: self.num_user_outputs], args, self.aliases)
            outs = outs[: len(outs) - self.hidden_outputs]
            return merge_constant_outputs(outs, self.constant_outputs)


@dataclass
class _BackwardState:
    """Compiles the backward graph on first use (and keeps it); threads running their first
    backward together compile it once (the others wait for it).

    A backward whose incoming gradients are partly None (outputs the loss does not use) gets its
    own graph, specialised on that pattern (tangents.py) and compiled once per pattern: it skips
    what only propagates them, and the gradients that only they reach are None, as in eager."""

    bw_gm: Any
    bw_compiler: Callable
    compiled: Callable | None = None
    num_saved: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: absent tangents (positions) -> (compiled graph, kept output positions); (None, kept)
    #: when the pattern cannot be specialised (zeros tensors are passed to the full graph, and
    #: only its ``kept`` gradients are returned: the others are exactly zero, None in eager);
    #: None when there is no graph to analyse (rebuilt from a cache)
    variants: dict = field(default_factory=dict, repr=False, compare=False)

    def get(self, args) -> Callable:
        compiled = self.compiled
        if compiled is None:
            with self._lock:
                if self.compiled is None:
                    self.compiled = self.bw_compiler(self.bw_gm, list(args))
                compiled = self.compiled
        return compiled

    def specialised(
        self, absent: tuple[int, ...], args
    ) -> tuple[Callable | None, tuple[int, ...]] | None:
        """The compiled backward for the tangents at ``absent`` being None, and which of the full
        graph's outputs it returns; (None, kept) when it needs zeros of symbolic size (the full
        graph runs with zeros tensors, and only the gradients at ``kept`` are not exactly zero);
        None when there is no graph to specialise (rebuilt from a cache)."""
        if absent in self.variants:
            return self.variants[absent]
        with self._lock:
            if absent not in self.variants:
                variant = None
                if self.bw_gm is not None:
                    try:
                        spec = without_tangents(self.bw_gm, self.num_saved, absent)
                        variant = (self.bw_compiler(spec.gm, list(args)), spec.kept)
                    except CannotSpecialise:
                        kept = without_tangents(
                            self.bw_gm, self.num_saved, absent, analysis=True
                        ).kept
                        variant = (None, kept)
                self.variants[absent] = variant
            return self.variants[absent]


@dataclass(frozen=True)
class TrainingPlan:
    """Everything the autograd.Function needs about the partitioned graphs."""

    compiled_fw: Callable
    backward: _BackwardState
    num_user_outputs: int
    mutated_inputs: tuple[int, ...]
    diff_outputs: tuple[int, ...]
    grad_inputs: tuple[int, ...]
    num_saved: int
    num_primals: int
    #: the min-cut's figures (None when rebuilt from a cache): what is saved, its bytes
    partition: Any = None
    #: the grad mode the graph was compiled for; False: called under no_grad, the graph enables
    #: grad in a region, so the Function is applied with grad on (else autograd records nothing)
    entry_grad: bool = True
    #: mutated inputs written in grad mode with a value that requires grad (joint.py): their new
    #: values are differentiable outputs, copied back with autograd recording (as eager's write)
    grad_mutations: tuple[int, ...] = ()
    #: user outputs that require grad but whose backward eager refuses, with eager's error
    #: (``joint.poisoned_outputs``): not differentiable outputs of the traced graphs, they still
    #: require grad, and a gradient reaching one raises that error, as in eager
    poisoned: tuple[tuple[int, str], ...] = ()
    #: per entry of ``grad_inputs``, the differentiable outputs (positions among
    #: ``diff_outputs``) the primal reaches (``joint.forward_reach``); None: unknown
    reaches: tuple[frozenset[int], ...] | None = None
    #: derived once, not per call: diff_outputs as a set; the outputs left differentiable (those
    #: and the poisoned); whether the gradients come in the order of the primals (grad_inputs is
    #: 0, 1, 2, ...: the result is the list itself, padded)
    diff_set: frozenset = field(init=False, repr=False, compare=False)
    requires_grad_set: frozenset = field(init=False, repr=False, compare=False)
    grads_in_order: bool = field(init=False, repr=False, compare=False)
    #: absent tangents -> the primals whose gradient is None, as no output they reach is used
    unreached: dict = field(init=False, repr=False, compare=False)

    def unreached_by(self, absent: tuple[int, ...]) -> frozenset[int]:
        """The primals (positions) no tangent but those at ``absent`` (None) would reach."""
        found = self.unreached.get(absent)
        if found is None:
            gone = set(absent)
            found = frozenset(
                i
                for i, reach in zip(self.grad_inputs, self.reaches or ())
                if reach and reach <= gone
            )
            self.unreached[absent] = found
        return found

    def __post_init__(self) -> None:
        object.__setattr__(self, "unreached", {})
        object.__setattr__(self, "diff_set", frozenset(self.diff_outputs))
        object.__setattr__(self, "requires_grad_set", self.diff_set | {i for i, _ in self.poisoned})
        object.__setattr__(
            self, "grads_in_order", tuple(self.grad_inputs) == tuple(range(len(self.grad_inputs)))
        )


#: in ``ctx.nontensor_saved``, the position of a value saved with ``ctx.save_for_backward``
_SAVED_TENSOR = object()


class CompiledFunction(torch.autograd.Function):
    """forward runs the compiled forward graph and saves its extra outputs; backward runs the
    compiled backward graph on them and the incoming gradients."""

    @staticmethod
    def forward(ctx, plan: TrainingPlan, *args):
        outs = list(plan.compiled_fw(*args))
        n_fw = plan.num_user_outputs + len(plan.mutated_inputs)
        fw_outs, saved = outs[:n_fw], outs[n_fw:]
        # a result that is a view of memory the compiled graph made (the wrapper's as_strided
        # of an intermediate) goes out as a plain tensor on that memory (detach: no copy).
        # Autograd refuses in-place writes to views that a Function of several outputs returns
        # (fuzz seed 21089: ``t2 = t0.unsqueeze(1)``, then ``t2.neg_()`` after a graph break),
        # and nothing the caller holds shares the intermediate: outputs that are views of one
        # another or of an input are rebuilt outside (view_bases.py, restore_aliases)
        for i in range(plan.num_user_outputs):
            o = fw_outs[i]
            if isinstance(o, torch.Tensor) and o._is_view():
                fw_outs[i] = o.detach()
        ctx.plan = plan
        diff = plan.diff_set
        ctx.output_meta = {
            i: (o.shape, o.dtype, o.device)
            for i, o in enumerate(fw_outs)
            if i in diff and isinstance(o, torch.Tensor)
        }
        tensors = [s for s in saved if isinstance(s, torch.Tensor)]
        ctx.save_for_backward(*tensors)
        # None: every saved value is a tensor (the usual case: no second pass over them, here
        # or in backward); else the non-tensors in their positions, _SAVED_TENSOR where a tensor
        # goes (not None: an op may return None for a tensor it did not compute, as an LSTM's
        # workspace out of training)
        ctx.nontensor_saved = (
            None
            if len(tensors) == len(saved)
            else [_SAVED_TENSOR if isinstance(s, torch.Tensor) else s for s in saved]
        )
        kept = plan.requires_grad_set
        non_diff = [
            o for i, o in enumerate(fw_outs) if isinstance(o, torch.Tensor) and i not in kept
        ]
        ctx.mark_non_differentiable(*non_diff)
        # an output the loss does not use comes to backward as None, not zeros (see _BackwardState)
        ctx.set_materialize_grads(False)
        return tuple(fw_outs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        if torch.is_grad_enabled():
            # create_graph=True: the compiled backward is not itself differentiable (its saved
            # activations carry no graph back to the inputs), so a second derivative would miss
            # terms: refuse rather than be silently wrong
            raise DoubleBackwardUnsupported(
                "torchkiln: backward with create_graph=True (double backward) through a compiled "
                "graph is not supported; compute higher-order gradients eagerly (torchkiln.disable "
                "the function) or take first-order gradients only"
            )
        plan: TrainingPlan = ctx.plan
        for i, message in plan.poisoned:
            if grad_outputs[i] is not None:
                raise RuntimeError(message)
        tangents = [grad_outputs[i] for i in plan.diff_outputs]
        absent = tuple(i for i, g in enumerate(tangents) if g is None)
        if tangents and len(absent) == len(tangents):
            # nothing flows back: no gradient, as in eager. Autograd's engine calls every node
            # it can reach, with no gradient where none came: the saved values are not
            # unpacked then (one written in place since, its version bumped, would raise where
            # eager's own node raises nothing; fuzz seed 22526)
            return (None,) * (1 + plan.num_primals)
        if ctx.nontensor_saved is None:
            args = list(ctx.saved_tensors)
        else:
            tensors = iter(ctx.saved_tensors)
            args = [next(tensors) if s is _SAVED_TENSOR else s for s in ctx.nontensor_saved]
            del tensors
        present = [g.contiguous() for g in tangents if g is not None]
        kept = None  # None: every gradient the full graph returns
        nonzero = None  # the full graph's gradients that are not exactly zero, when some are
        variant = plan.backward.specialised(absent, args + present) if absent else None
        if variant is not None and variant[0] is not None:
            compiled, kept = variant
            args += present
        else:
            if variant is not None:
                nonzero = variant[1]
            args += [
                _zeros_for(ctx, i) if g is None else g.contiguous()
                for i, g in zip(plan.diff_outputs, tangents)
            ]
            compiled = plan.backward.get(args)
        # As eager frees each saved activation once its node's backward ran, let the compiled
        # backward free each one at its last use: the context lets go of them (unless the graph
        # is retained) and a boxed callable takes the only other references, the list.
        clear = getattr(ctx, "maybe_clear_saved_tensors", None)  # torch >= 2.1
        if clear is not None:
            clear()
        boxed = getattr(compiled, "call_boxed", None)
        grads = list(boxed(args) if boxed is not None else compiled(*args))
        if nonzero is not None:  # the zeros the full graph computed are None, as in eager
            grads, kept = [grads[k] for k in nonzero], nonzero
        if absent and plan.reaches is not None and (unreached := plan.unreached_by(absent)):
            # a primal that reaches only outputs the loss does not use: None, as in eager, though
            # its gradient is no zero the analysis found (an empty tensor's, seed 52301)
            order = plan.grad_inputs if kept is None else [plan.grad_inputs[k] for k in kept]
            pairs = [(i, g) for i, g in zip(order, grads) if i not in unreached]
            kept = tuple(plan.grad_inputs.index(i) for i, _ in pairs)
            grads = [g for _, g in pairs]
        if kept is None and plan.grads_in_order and len(grads) == len(plan.grad_inputs):
            # the gradients of the first primals, in order: no scatter into a list of Nones
            return (None, *grads, *(None,) * (plan.num_primals - len(grads)))
        result: list[torch.Tensor | None] = [None] * plan.num_primals
        grad_inputs = plan.grad_inputs if kept is None else [plan.grad_inputs[k] for k in kept]
        for i, g in zip(grad_inputs, grads):
            result[i] = g
        return (None, *result)


#: autograd.Function.apply's C++ half, bound to CompiledFunction; and functorch's unwrapping of
#: a tensor left wrapped by a transform that has exited
_C_APPLY = super(torch.autograd.Function, CompiledFunction).apply
_unwrap_if_dead = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)


def _apply(plan: TrainingPlan, graph_args: list[Any]) -> Any:
    """``CompiledFunction.apply(plan, *graph_args)``. Function.apply's Python half, for a
    Function without setup_context and no functorch transform active, only unwraps dead functorch
    wrappers, through a generator (30 us per call of a 200-parameter model); this unwraps them
    with a list comprehension and calls the C++ half. Under a functorch transform (or a torch
    without the unwrapping function) it is Function.apply itself, and its error."""
    if _unwrap_if_dead is None or torch._C._are_functorch_transforms_active():
        return CompiledFunction.apply(plan, *graph_args)
    unwrap, tensor = _unwrap_if_dead, torch.Tensor
    return _C_APPLY(plan, *[unwrap(a) if isinstance(a, tensor) else a for a in graph_args])


def _zeros_for(ctx, output: int) -> torch.Tensor:
    """The zero gradient of forward output ``output`` (the full backward graph takes one)."""
    meta = ctx.output_meta[output]
    return torch.zeros(meta[0], dtype=meta[1], device=meta[2])


@dataclass(frozen=True)
class TrainingRuntime:
    """The callable for the training path: apply the autograd.Function, then copy back mutations."""

    plan: TrainingPlan
    params: tuple[torch.Tensor, ...]
    constant_outputs: tuple[tuple[int, Any], ...] = ()
    aliases: tuple[OutputAlias, ...] | ShapeDependentAliases = ()
    bases: SyntheticBases | None = None
    #: the last user outputs are intermediates views are rebuilt from (view_bases.py), not returned
    hidden_outputs: int = 0

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        args = [*self.params, *inputs]
        graph_args = self.bases.graph_args(args) if self.bases is not None else args
        if self.plan.grad_mutations:
            _refuse_leaf_writes(graph_args, self.plan.grad_mutations)
        try:
            if self.plan.entry_grad:
                outs = list(_apply(self.plan, graph_args))
            else:
                with torch.enable_grad():
                    outs = list(_apply(self.plan, graph_args))
        except Exception as exc:
            _raise_if_written(exc)
            raise
        n = self.plan.num_user_outputs
        apply_mutations(
            graph_args, self.plan.mutated_inputs, outs[n:], with_grad=self.plan.grad_mutations
        )
        with _after_write_back(self.plan.mutated_inputs):
            # An aliased output is rebuilt as a view outside the Function: its gradient then flows
            # through eager's view backward (the Function's copy of it gets a zero tangent).
            outs = restore_aliases(outs[:n], args, self.aliases)
            outs = outs[: len(outs) - self.hidden_outputs]
            return merge_constant_outputs(outs, self.constant_outputs)


def _refuse_leaf_writes(args: list[Any], grad_mutations: tuple[int, ...]) -> None:
    """Eager's error, before anything ran, for a leaf that requires grad where the graph writes
    an input in grad mode (it was compiled for a non-leaf; leafness is not guarded)."""
    for i in grad_mutations:
        root = autograd_root(args[i])
        if root.is_leaf and root.requires_grad:
            raise RuntimeError(
                "a leaf Variable that requires grad is being used in an in-place operation."
                if root is args[i]
                else "a view of a leaf Variable that requires grad is being used in an in-place "
                "operation."
            )


def _raise_if_written(exc: Exception) -> None:
    """A compiled graph that failed after it wrote a mutated input in place (contract C2's
    ``mutations_in_place``; loop-ir marks the exception) must not run again, eagerly or not."""
    if getattr(exc, "inputs_written_in_place", False):
        raise MutationAppliedError(
            f"the compiled graph failed after writing a mutated input in place "
            f"({type(exc).__name__}: {exc})"
        ) from exc


@contextlib.contextmanager
def _after_write_back(mutated_inputs):
    """A failure after input mutations were written back says so (MutationAppliedError): the
    caller must not run the graph again, eagerly or not."""
    try:
        yield
    except Exception as exc:
        if not mutated_inputs:
            raise
        raise MutationAppliedError(
            f"the compiled graph failed after writing its input mutations back "
            f"({type(exc).__name__}: {exc})"
        ) from exc
