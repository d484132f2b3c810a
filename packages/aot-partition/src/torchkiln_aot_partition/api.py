"""aot_compile: contract C2, the entry point the meta-package calls."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import fx

from .aliasing import SyntheticBases, has_static_geometry, shared_storage_groups, synthetic_bases
from .attention import fuse_attention
from .errors import AOTError
from .freezing import freeze
from .joint import joint_graph
from .mutation import (
    OutputAlias,
    ShapeDependentAliases,
    attribute_to_viewed_inputs,
    find_output_aliases,
    in_place_mutations,
    output_aliases,
    with_eager_size_one_strides,
)
from .partition import min_cut_partition
from .runtime import InferenceRuntime, TrainingPlan, TrainingRuntime, _BackwardState
from .sdpa_masks import simplify_sdpa_masks
from .trace import (
    Decompositions,
    FunctionalGraph,
    functional_graph,
    lift_parameters,
    resolve_decompositions,
    symbolic_inputs,
    trace_functional,
)
from .view_bases import expose_view_bases


def _refuse_while_loop_backward(gm: torch.fx.GraphModule) -> None:
    """torch's backward of while_loop keeps every iteration's carried values in buffers sized by
    the data-dependent trip count; functionalizing that trace asks for a guard on the unbacked
    count and fails deep inside make_fx. Say so plainly instead (the graph then runs eagerly,
    where torch's own while_loop autograd runs)."""
    op = getattr(torch.ops.higher_order, "while_loop", None)
    for node in gm.graph.nodes:
        if node.op == "call_function" and op is not None and node.target is op:
            raise AOTError(
                "autograd through while_loop is not compiled (its backward is sized by a "
                "data-dependent trip count; torch's own while_loop autograd runs it)"
            )


def enables_grad(gm: fx.GraphModule) -> bool:
    """Whether the graph turns grad mode on somewhere (capture's ``enable_grad`` region)."""
    return any(
        n.op == "call_function" and n.target is torch._C._set_grad_enabled and n.args[:1] == (True,)
        for n in gm.graph.nodes
    )


def aot_compile(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    decompositions: Decompositions | None = None,
    partition_fn: Callable = min_cut_partition,
    freeze_parameters: bool = True,
    sdpa_attention: bool = True,
) -> Callable[..., list[torch.Tensor]]:
    """Compile a torch-level graph (contract C1) ahead of time; returns compiled(*graph_inputs) -> list.

    Inference path (grad mode off, or no input and no lifted parameter requires grad): one
    functional ATen graph goes to fw_compiler(aten_gm, aten_example_inputs). Training path: the
    joint forward+backward graph is split by `partition_fn(joint_gm, num_fwd_outputs=...,
    num_primals=...)` -> (fw_gm, bw_gm); fw_compiler gets fw_gm now, bw_compiler (default:
    fw_compiler) gets bw_gm on the first backward. Input mutations are copied back after each call.
    """
    bw_compiler = bw_compiler or fw_compiler
    decomps = resolve_decompositions(decompositions)
    example_inputs = list(example_inputs)
    # input-free attention masks that keep everything or the lower triangle: no mask, or
    # is_causal (sdpa_masks.py), before both traces so a backward is the causal kernel's too
    masks = simplify_sdpa_masks(gm) if sdpa_attention else []
    # views of an intermediate the graph does not return: it returns that too (view_bases.py)
    gm, hidden = expose_view_bases(gm, example_inputs)
    lifted = lift_parameters(gm)
    primals = list(lifted.params) + example_inputs
    # called under no_grad, a graph whose enable_grad region reads an input that requires grad
    # still trains (its outputs from that region carry a gradient, as eager's do)
    entry_grad = torch.is_grad_enabled()
    needs_grad = (entry_grad or enables_grad(gm)) and any(
        isinstance(p, torch.Tensor) and p.requires_grad for p in primals
    )

    fakes = symbolic_inputs(lifted)

    def output_aliases_of(fake_run=None) -> tuple[OutputAlias, ...] | ShapeDependentAliases:
        found = (
            with_eager_size_one_strides(lifted.gm, primals, output_aliases(*fake_run))
            if fake_run is not None
            else find_output_aliases(lifted.gm, primals)
        )
        if found and fakes is None:  # inputs sharing a storage: the one the graph viewed
            found = attribute_to_viewed_inputs(lifted.gm, primals, found)
        if found and fakes is not None:  # a view's geometry depends on the sizes
            return ShapeDependentAliases(lifted.gm)
        return found

    if not needs_grad:
        aliases = output_aliases_of()
        fg, _ = functional_graph(gm, example_inputs, decomps)
        bases = _bases_for(primals, fg.mutated_inputs, grad=False, fakes=fakes)
        if bases is not None:  # aliased inputs are mutated: trace again over their bases
            with torch.no_grad():
                if fakes is None:
                    fg = trace_functional(bases.wrap(lifted.gm), bases.graph_args(primals), decomps)
                else:  # the other inputs keep their symbolic sizes
                    fg = trace_functional(
                        bases.wrap(lifted.gm), bases.graph_args_fake(fakes), decomps, fake=False
                    )
        graph_inputs = bases.graph_args(primals) if bases is not None else primals
        if sdpa_attention and fakes is None:
            fg = _route_attention(fg, graph_inputs, decomps)
        folded = None
        if freeze_parameters and bases is None and fakes is None:
            frozen = [i for i in range(len(lifted.params)) if i not in set(fg.mutated_inputs)]
            folded, stats = freeze(fg.gm, graph_inputs, frozen)
            fg.gm.meta["freeze"] = stats
        # contract C2: which mutated inputs the compiler may write in place (mutation.py)
        fg.gm.meta["mutations_in_place"] = (
            in_place_mutations(fg.gm, graph_inputs, fg.mutated_inputs, fg.num_user_outputs, aliases)
            if bases is None
            else ()
        )
        extra = folded.values(graph_inputs) if folded is not None else []
        # contract C2: the user outputs of an inference graph reach the caller as they are, so
        # their strides are the compiler's to choose (a training forward's go through autograd)
        fg.gm.meta["free_output_strides"] = 0 if aliases or hidden else fg.num_user_outputs
        fg.gm.meta["sdpa_masks"] = masks
        # the graph inputs it writes (the runtime copies their new values back): a caller that
        # replays the compiled graph without the runtime (a CUDA graph) must not skip them
        fg.gm.meta["mutated_inputs"] = tuple(fg.mutated_inputs)
        compiled = fw_compiler(fg.gm, [_detached(p) for p in graph_inputs] + extra)
        return InferenceRuntime(
            compiled,
            lifted.params,
            fg.num_user_outputs,
            fg.mutated_inputs,
            lifted.constant_outputs,
            aliases,
            bases,
            folded,
            hidden,
        )

    _refuse_while_loop_backward(gm)
    joint = joint_graph(lifted.gm, primals, decomps, fake_primals=fakes, entry_grad=entry_grad)
    # the joint's own fake run of the graph (static shapes) finds the aliases: no run of its own
    aliases = output_aliases_of(joint.fake_run)
    bases = _bases_for(primals, joint.mutated_inputs, grad=True, fakes=fakes)
    graph_inputs = primals
    if bases is not None:
        graph_inputs = bases.graph_args(primals)
        joint = joint_graph(
            bases.wrap(lifted.gm),
            graph_inputs,
            decomps,
            fake_primals=bases.graph_args_fake(fakes) if fakes is not None else None,
            entry_grad=entry_grad,
        )
    # the partitioners never save a mutated input: the runtime writes its new value into it after
    # the forward, and autograd refuses a saved tensor changed in place since it was saved
    joint.gm.meta["mutated_inputs"] = tuple(joint.mutated_inputs)
    fw_gm, bw_gm = partition_fn(
        joint.gm, num_fwd_outputs=joint.num_fwd_outputs, num_primals=joint.num_primals
    )
    fw_gm.meta["mutated_inputs"] = joint.mutated_inputs
    fw_gm.meta["num_user_outputs"] = joint.num_user_outputs
    fw_gm.meta["sdpa_masks"] = masks
    fw_gm.meta["mutations_in_place"] = (
        tuple(
            (k, i)
            for k, i in in_place_mutations(
                fw_gm, graph_inputs, joint.mutated_inputs, joint.num_user_outputs, aliases
            )
            if i not in joint.grad_mutations  # copied back with autograd recording
        )
        if bases is None
        else ()
    )
    num_saved = (
        len(next(n for n in fw_gm.graph.nodes if n.op == "output").args[0]) - joint.num_fwd_outputs
    )
    # contract C2: the saved values go only to the backward graph, which is compiled (lazily)
    # against the tensors the forward returned, so their strides are the compiler's to choose
    fw_gm.meta["free_saved_strides"] = num_saved
    bw_gm.meta["saved_inputs"] = num_saved
    compiled_fw = fw_compiler(fw_gm, [_detached(p) for p in graph_inputs])
    plan = TrainingPlan(
        compiled_fw=compiled_fw,
        backward=_BackwardState(bw_gm, bw_compiler, num_saved=num_saved),
        num_user_outputs=joint.num_user_outputs,
        mutated_inputs=joint.mutated_inputs,
        diff_outputs=joint.diff_outputs,
        grad_inputs=joint.grad_inputs,
        num_saved=num_saved,
        num_primals=joint.num_primals,
        partition=fw_gm.meta.get("partition"),
        entry_grad=entry_grad,
        grad_mutations=joint.grad_mutations,
        poisoned=joint.poisoned,
        reaches=joint.reaches,
    )
    return TrainingRuntime(plan, lifted.params, lifted.constant_outputs, aliases, bases, hidden)


def _detached(p: object) -> object:
    """A graph input for the compiler: a tensor detached, an int input (a symbolic size) as is."""
    return p.detach() if isinstance(p, torch.Tensor) else p


def _route_attention(fg: FunctionalGraph, graph_inputs, decomps) -> FunctionalGraph:
    """``fg`` with its hand-written attention routed to scaled_dot_product_attention (see
    attention.py), traced again so torch picks the kernel; ``fg`` itself, untouched, when nothing
    matched or torch picked no attention kernel. The decisions go to ``gm.meta["attention"]``."""
    # the rewrite works on a copy (nodes' meta shared, not copied) so fg stays as it was
    candidate = fx.GraphModule(fg.gm, copy.deepcopy(fg.gm.graph))
    stats = fuse_attention(candidate)
    if stats.fused:
        with torch.no_grad():
            again = trace_functional(candidate, graph_inputs, decomps)
        if any("scaled_dot_product" in str(n.target) for n in again.gm.graph.nodes):
            again.gm.meta.update(fg.gm.meta)
            again.gm.meta["attention"] = stats
            return FunctionalGraph(again.gm, fg.num_user_outputs, fg.mutated_inputs)
        stats.refused += [
            f"{line.split(':')[0]}: torch picked no attention kernel for these inputs "
            "(its math fallback, or a table that decomposes the kernels): left as written"
            for line in stats.fused
        ]
        stats.fused.clear()
    fg.gm.meta["attention"] = stats
    return fg


def _bases_for(primals, mutated_inputs, *, grad: bool, fakes) -> SyntheticBases | None:
    """Synthetic bases when inputs that share a storage are mutated (see aliasing.py), else None:
    aliased inputs that are only read need nothing. Under symbolic shapes (``fakes``) the aliased
    inputs' own geometry must be static (capture keeps the sizes of arguments that share a storage
    static; the other inputs stay symbolic)."""
    mutated = set(mutated_inputs)
    groups = [g for g in shared_storage_groups(primals) if mutated.intersection(g)]
    if not groups:
        return None
    if fakes is not None and not all(has_static_geometry(fakes[i]) for g in groups for i in g):
        raise AOTError(
            "graph inputs that share a storage are mutated and have symbolic sizes, "
            "strides or storage offsets (their synthetic base needs static geometry)"
        )
    return synthetic_bases(primals, groups, grad=grad)
