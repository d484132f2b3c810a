"""aot_compile: contract C2, the entry point the meta-package calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import fx

from .joint import joint_graph
from .mutation import find_output_aliases
from .partition import min_cut_partition
from .runtime import InferenceRuntime, TrainingPlan, TrainingRuntime, _BackwardState
from .trace import functional_graph, lift_parameters, resolve_decompositions, symbolic_inputs


def aot_compile(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    *,
    fw_compiler: Callable,
    bw_compiler: Callable | None = None,
    decompositions=None,
    partition_fn: Callable = min_cut_partition,
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
    lifted = lift_parameters(gm)
    primals = list(lifted.params) + example_inputs
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(p, torch.Tensor) and p.requires_grad for p in primals)

    fakes = symbolic_inputs(lifted)
    aliases = () if fakes is not None else find_output_aliases(lifted.gm, primals)

    if not needs_grad:
        fg, _ = functional_graph(gm, example_inputs, decomps)
        compiled = fw_compiler(fg.gm, [p.detach() for p in primals])
        return InferenceRuntime(compiled, lifted.params, fg.num_user_outputs, fg.mutated_inputs,
                                lifted.constant_outputs, aliases)

    joint = joint_graph(lifted.gm, primals, decomps, fake_primals=fakes)
    fw_gm, bw_gm = partition_fn(joint.gm, num_fwd_outputs=joint.num_fwd_outputs,
                                num_primals=joint.num_primals)
    fw_gm.meta["mutated_inputs"] = joint.mutated_inputs
    fw_gm.meta["num_user_outputs"] = joint.num_user_outputs
    compiled_fw = fw_compiler(fw_gm, [p.detach() for p in primals])
    num_saved = len(next(n for n in fw_gm.graph.nodes if n.op == "output").args[0]) - joint.num_fwd_outputs
    plan = TrainingPlan(
        compiled_fw=compiled_fw,
        backward=_BackwardState(bw_gm, bw_compiler),
        num_user_outputs=joint.num_user_outputs,
        mutated_inputs=joint.mutated_inputs,
        diff_outputs=joint.diff_outputs,
        grad_inputs=joint.grad_inputs,
        num_saved=num_saved,
        num_primals=joint.num_primals,
    )
    return TrainingRuntime(plan, lifted.params, lifted.constant_outputs, aliases)
