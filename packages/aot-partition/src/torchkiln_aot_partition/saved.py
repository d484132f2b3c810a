"""What a runtime made by ``aot_compile`` knows besides its compiled graphs, as plain data.

A persistent cache above aot-partition saves the compiled forward (and backward) graphs in its
own form and this ``RuntimeMetadata`` beside them; ``rebuild_runtime`` then makes the same
runtime for the same torch-level graph without tracing, functionalizing or partitioning it. Only
the parameters are taken from the graph module at hand (``lift_parameters``: the live tensors,
in the order the compiled graphs expect them).

The metadata is only valid for the graph, input metadata and grad mode it was made under; the
caller's key must cover them. Graphs with symbolic sizes are not supported: tracing them adds
shape guards that a rebuilt runtime would not add.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import fx

from .aliasing import SyntheticBases
from .errors import AOTError
from .freezing import FoldedConstants
from .mutation import OutputAlias, ShapeDependentAliases
from .partition import PartitionStats
from .runtime import InferenceRuntime, TrainingPlan, TrainingRuntime, _BackwardState
from .trace import lift_parameters


@dataclass(frozen=True)
class RuntimeMetadata:
    """Everything but the compiled graphs: training=False is the inference path (no saved
    tensors, no backward), in which diff_outputs/grad_inputs/num_saved are unused."""

    training: bool
    num_user_outputs: int
    mutated_inputs: tuple[int, ...]
    constant_outputs: tuple[tuple[int, Any], ...]
    aliases: tuple[OutputAlias, ...]
    num_params: int
    diff_outputs: tuple[int, ...] = ()
    grad_inputs: tuple[int, ...] = ()
    num_saved: int = 0
    num_primals: int = 0
    folded: FoldedConstants | None = None  # the constant graph of frozen parameters
    # inputs that share a storage and are mutated: the graph takes their bases (aliasing.py)
    bases: SyntheticBases | None = None
    hidden_outputs: int = 0  # intermediates returned only to rebuild views from (view_bases.py)
    #: the min-cut's figures (what the forward saves, its bytes), kept so that a runtime rebuilt
    #: from a cache still reports them
    partition: PartitionStats | None = None
    entry_grad: bool = True  # see TrainingPlan.entry_grad
    grad_mutations: tuple[int, ...] = ()  # see TrainingPlan.grad_mutations
    poisoned: tuple[tuple[int, str], ...] = ()  # see TrainingPlan.poisoned
    reaches: tuple[frozenset[int], ...] | None = None  # see TrainingPlan.reaches


def runtime_metadata(runtime: Any) -> RuntimeMetadata:
    """The metadata of a runtime ``aot_compile`` returned."""
    if isinstance(runtime.aliases, ShapeDependentAliases):
        raise AOTError("output aliases under symbolic shapes are found per call: not saved")
    if isinstance(runtime, InferenceRuntime):
        return RuntimeMetadata(
            False,
            runtime.num_user_outputs,
            tuple(runtime.mutated_inputs),
            tuple(runtime.constant_outputs),
            tuple(runtime.aliases),
            len(runtime.params),
            bases=runtime.bases,
            folded=runtime.folded,
            hidden_outputs=runtime.hidden_outputs,
        )
    if isinstance(runtime, TrainingRuntime):
        plan = runtime.plan
        return RuntimeMetadata(
            True,
            plan.num_user_outputs,
            tuple(plan.mutated_inputs),
            tuple(runtime.constant_outputs),
            tuple(runtime.aliases),
            len(runtime.params),
            tuple(plan.diff_outputs),
            tuple(plan.grad_inputs),
            plan.num_saved,
            plan.num_primals,
            bases=runtime.bases,
            hidden_outputs=runtime.hidden_outputs,
            partition=plan.partition,
            entry_grad=plan.entry_grad,
            grad_mutations=plan.grad_mutations,
            poisoned=plan.poisoned,
            reaches=plan.reaches,
        )
    raise AOTError(f"not a runtime made by aot_compile: {type(runtime).__name__}")


def rebuild_runtime(
    gm: fx.GraphModule,
    meta: RuntimeMetadata,
    compiled_fw: Callable,
    compiled_bw: Callable | None = None,
) -> InferenceRuntime | TrainingRuntime:
    """The runtime ``aot_compile(gm, ...)`` returned when ``meta`` was taken, from its compiled
    forward (and, for training, backward) graphs; the parameters are ``gm``'s own."""
    lifted = lift_parameters(gm)
    if len(lifted.params) != meta.num_params:
        raise AOTError(
            f"the graph lifts {len(lifted.params)} parameters, the saved runtime "
            f"expected {meta.num_params}"
        )
    if not meta.training:
        return InferenceRuntime(
            compiled_fw,
            lifted.params,
            meta.num_user_outputs,
            meta.mutated_inputs,
            meta.constant_outputs,
            meta.aliases,
            meta.bases,
            folded=meta.folded,
            hidden_outputs=meta.hidden_outputs,
        )
    if compiled_bw is None:
        raise AOTError("a training runtime needs its compiled backward graph")

    def no_compile(bw_gm: Any, args: Any) -> Callable:
        return compiled_bw

    plan = TrainingPlan(
        compiled_fw=compiled_fw,
        backward=_BackwardState(None, no_compile, compiled_bw),
        num_user_outputs=meta.num_user_outputs,
        mutated_inputs=meta.mutated_inputs,
        diff_outputs=meta.diff_outputs,
        grad_inputs=meta.grad_inputs,
        num_saved=meta.num_saved,
        num_primals=meta.num_primals,
        partition=meta.partition,
        entry_grad=meta.entry_grad,
        grad_mutations=meta.grad_mutations,
        poisoned=meta.poisoned,
        reaches=meta.reaches,
    )
    return TrainingRuntime(
        plan, lifted.params, meta.constant_outputs, meta.aliases, meta.bases, meta.hidden_outputs
    )
