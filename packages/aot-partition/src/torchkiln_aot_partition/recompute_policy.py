"""Which cheap forward values the min-cut may still not recompute in the backward.

The min-cut (``partition.min_cut_partition``) prices only memory: it saves the cheapest set of
bytes and recomputes everything else that is cheap. Two kinds of recomputation cost more than the
bytes they spare, and this module bans them (the forward computes the value anyway; the cut may
then save it, or something downstream of it):

- **Materialized in the backward.** A value that a matmul, convolution or attention of the
  backward reads (the weight gradient of a linear layer reads its input) is written out before
  that op runs, recomputed or not: the op reads memory, it cannot take a fused producer. The
  recompute then costs a kernel that writes and reads it again, to spare bytes that the forward
  had in memory anyway (it fed the same op in the forward).
- **Chains.** A residual stream is a chain: each layer's hidden state is the last one's plus a
  matmul output (and, post-norm, a normalization with saved statistics). Left alone the cut
  saves only the matmul outputs and recomputes the whole stream from the first layer, at the
  start of the backward, in one kernel that reads every layer (BERT-base: 126 inputs,
  67 outputs, all of them alive through the backward). A recomputed value may read at most
  ``MAX_RECOMPUTE_INPUTS`` forward values of at least half its size (besides the inputs and
  parameters of the graph); a value past that is banned, so the stream is saved every few
  layers and each recompute reads what one or two layers made.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import fx

from ._compat import numel_hint

aten = torch.ops.aten

#: a recomputed value reads at most this many saved forward values of at least half its size
MAX_RECOMPUTE_INPUTS = 2
#: ... and at most this many saved values of any size
_MAX_RECOMPUTE_READS = 64

#: backward ops whose tensor inputs are read from memory however they were made (loop-ir runs
#: them as extern kernels)
_MATERIALIZING = frozenset(
    packet
    for name in (
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "convolution",
        "convolution_backward",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_flash_attention_backward",
        "_efficient_attention_backward",
    )
    if (packet := getattr(aten, name, None)) is not None
)


def _is_view(node: fx.Node) -> bool:
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and target.is_view


def _read_by_materializing_op(node: fx.Node, bw_nodes: set[fx.Node]) -> bool:
    """Whether a backward matmul/convolution/attention reads ``node``, or a view of it."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for user in n.users:
            target = user.target
            if (
                user in bw_nodes
                and isinstance(target, torch._ops.OpOverload)
                and target.overloadpacket in _MATERIALIZING
            ):
                return True
            if user not in bw_nodes and _is_view(user) and user.args and user.args[0] is n:
                stack.append(user)  # a view of n (not one that reads n as a size)
    return False


def _numel(node: fx.Node) -> int | None:
    val = node.meta.get("val")
    return numel_hint(val) if isinstance(val, torch.Tensor) else None


def banned_from_recompute(
    joint_gm: fx.GraphModule,
    bw_nodes: set[fx.Node],
    fw_required: set[fx.Node],
    is_boundary: Callable[[fx.Node], bool],
) -> set[fx.Node]:
    """The forward values (among ``fw_required``: the forward computes them anyway) that the
    cut must not recompute, by the two rules of this module. ``is_boundary(node)`` says whether
    the cut already never recomputes ``node`` (a matmul, a reduction, a graph input)."""
    banned: set[fx.Node] = set()
    # the saved forward values a recompute of each cheap node reads (boundary nodes have none)
    reads: dict[fx.Node, frozenset[fx.Node]] = {}
    for node in joint_gm.graph.nodes:
        if node in bw_nodes or node.op != "call_function" or is_boundary(node):
            continue
        own = _numel(node)
        if (
            own is not None  # a tensor: a size has no savable form
            and node in fw_required
            and not _is_view(node)
            and _read_by_materializing_op(node, bw_nodes)
        ):
            # the value itself, not its views: saving the base keeps one storage, while three
            # banned views of it (a layer norm's output read by the q, k and v projections)
            # would each be saved, as three buffers
            banned.add(node)
            continue
        inputs: set[fx.Node] = set()
        for arg in node.all_input_nodes:
            if arg in reads:
                inputs |= reads[arg]
            elif arg.op != "placeholder":
                inputs.add(arg)
        if node in fw_required and own is not None and not _is_view(node):
            large = sum(1 for i in inputs if (n := _numel(i)) is not None and 2 * n >= own)
            if large > MAX_RECOMPUTE_INPUTS or len(inputs) > _MAX_RECOMPUTE_READS:
                banned.add(node)
                continue
        reads[node] = frozenset(inputs)
    return banned


__all__ = ["MAX_RECOMPUTE_INPUTS", "banned_from_recompute"]
