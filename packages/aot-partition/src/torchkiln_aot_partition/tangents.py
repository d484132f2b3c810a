"""Backward graphs specialised on which incoming gradients (tangents) are None.

A forward output the loss does not use (BERT's pooler output, GPT-2's cached keys and values)
reaches the compiled backward with no gradient: eager's autograd then skips every node that only
propagates it, and a parameter that only feeds it keeps ``grad is None``. Passing a zeros tensor
for it instead makes the backward allocate and multiply zeros. ``without_tangents`` rewrites the
backward graph for one pattern of absent tangents, structurally: an absent tangent is a *zero*
value with no node, zeros propagate through the ops that are linear in them (views, sums,
matmuls, the ``*_backward`` ops of their grad argument, ...), an add of a zero term becomes its
other operand, and a gradient that ends up zero is not returned at all (the runtime gives None,
as eager does). Only where a zero meets an op with no rule is a zeros tensor made (``aten.full``),
so the result equals the full graph's with zero tangents, minus the work.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from .checks import keep_impure_or_checking

aten = torch.ops.aten


class CannotSpecialise(Exception):
    """A zero would need a zeros tensor of symbolic size: the caller keeps the full graph."""


# Linear in each tensor argument together: zero when every tensor argument is zero.
_LINEAR = frozenset(
    {
        aten.add,
        aten.sub,
        aten.neg,
        aten.clone,
        aten.alias,
        aten.view,
        aten._unsafe_view,
        aten.reshape,
        aten.expand,
        aten.permute,
        aten.t,
        aten.transpose,
        aten.unsqueeze,
        aten.squeeze,
        aten.slice,
        aten.select,
        aten.as_strided,
        aten.sum,
        aten.mean,
        aten._to_copy,
        aten.cat,
        aten.stack,
        aten.split,
        aten.split_with_sizes,
        aten.unbind,
        aten.flip,
        aten.repeat,
        aten.contiguous,
        aten.view_copy,
        aten.expand_copy,
        aten.permute_copy,
        aten.squeeze_copy,
        aten.unsqueeze_copy,
        aten.slice_copy,
        aten.select_copy,
        aten.t_copy,
        aten.transpose_copy,
        aten.alias_copy,
        aten.index_select,
        aten.gather,
        aten.index,
        aten.constant_pad_nd,
    }
)
# Zero as soon as one factor is zero (products), or the numerator is.
_PRODUCT = frozenset({aten.mul, aten.mm, aten.bmm, aten.matmul, aten.dot, aten.baddbmm})
_NUMERATOR = frozenset({aten.div})
# Scatters of a zero source into a zeros tensor.
_SCATTER = frozenset(
    {
        aten.select_scatter,
        aten.slice_scatter,
        aten.index_put,
        aten.scatter,
        aten.scatter_add,
        aten.index_add,
        aten.diagonal_scatter,
        aten.as_strided_scatter,
    }
)
_ZERO_FILLS = frozenset({aten.zeros, aten.zeros_like, aten.new_zeros})


@dataclass(frozen=True)
class SpecialisedBackward:
    """The backward graph without some tangents: ``gm(*saved, *present tangents)`` returns the
    gradients at positions ``kept`` of the full graph's outputs; the others are None."""

    gm: fx.GraphModule
    kept: tuple[int, ...]


def without_tangents(
    bw_gm: fx.GraphModule, num_saved: int, absent: Sequence[int], *, analysis: bool = False
) -> SpecialisedBackward:
    """``bw_gm`` (placeholders: saved values, then tangents) specialised on the tangents at
    positions ``absent`` (counted among the tangents) being None. Raises CannotSpecialise when a
    zeros tensor of symbolic size would be needed, unless ``analysis``: then only ``kept`` is
    meant (which gradients are not exactly zero; such a zero stands in as a placeholder, and
    the graph is not to be run)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    zeros: set[fx.Node] = set()  # old nodes whose value is exactly zero, with no new node
    made: dict[fx.Node, fx.Node] = {}  # zeros tensors made for a zero that met an op with no rule
    absent = set(absent)
    placeholders = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    absent_nodes = {placeholders[num_saved + i] for i in absent}

    def real(old):
        """The new graph's value for ``old`` (a zeros tensor when it is a zero)."""
        if not isinstance(old, fx.Node):
            return old
        if old in zeros:
            if old not in made:
                made[old] = (
                    graph.placeholder(f"_zero_{len(made)}")
                    if analysis
                    else _zeros_like_node(graph, old)
                )
            return made[old]
        return env[old]

    outputs = None
    for node in bw_gm.graph.nodes:
        if node.op == "placeholder":
            if node not in absent_nodes:
                env[node] = graph.node_copy(node, lambda n: env[n])
            else:
                zeros.add(node)
            continue
        if node.op == "output":
            outputs = node.args[0]
            continue
        if any(a in zeros for a in node.all_input_nodes):
            rewritten = _propagate(node, zeros, env, graph)
            if rewritten is _ZERO:
                zeros.add(node)
                continue
            if rewritten is not None:
                env[node] = rewritten
                continue
        env[node] = graph.node_copy(node, real)
    flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    kept = tuple(i for i, o in enumerate(flat) if not (isinstance(o, fx.Node) and o in zeros))
    graph.output(tuple(real(flat[i]) for i in kept))
    graph.eliminate_dead_code(is_impure_node=keep_impure_or_checking)
    gm = fx.GraphModule(bw_gm, graph)
    gm.meta.update(bw_gm.meta)
    gm.meta["absent_tangents"] = tuple(sorted(absent))
    return SpecialisedBackward(gm, kept)


_ZERO = object()  # _propagate's answer: the node's value is exactly zero


def _propagate(node: fx.Node, zeros: set[fx.Node], env: dict, graph: fx.Graph):
    """How ``node``, one of whose inputs is a zero, is rewritten: _ZERO, a new node standing for
    it (an add of a zero term is its other operand), or None (copy it, zeros made real)."""
    if node.op != "call_function":
        return None
    target = node.target
    if target is operator.getitem:
        return _ZERO if node.args[0] in zeros else None
    if not isinstance(target, torch._ops.OpOverload):
        return None
    packet = target.overloadpacket
    tensors = [a for a in _flat_args(node) if isinstance(a, fx.Node)]
    # the values it is linear in: its floating tensors (indices and masks are not)
    values = [a for a in tensors if a in zeros or _is_float(a)]
    if packet in _LINEAR and all(a in zeros for a in values):
        return _ZERO
    if packet in _PRODUCT and any(a in zeros for a in node.args[:2] if isinstance(a, fx.Node)):
        if packet is not aten.baddbmm or node.args[0] in zeros:
            return _ZERO
        return None
    if packet in _NUMERATOR and node.args[0] in zeros:
        return _ZERO
    if packet in _SCATTER and all(
        a in zeros or (a is node.args[0] and _is_zero_fill(a)) for a in values
    ):
        return _ZERO
    if (
        packet is aten.where
        and len(node.args) == 3
        and all(
            isinstance(a, fx.Node) and (a in zeros or _is_zero_fill(a)) or a == 0
            for a in node.args[1:]
        )
    ):
        return _ZERO
    if packet is aten.copy and isinstance(node.args[1], fx.Node) and node.args[1] in zeros:
        return _ZERO  # copy(dst, src) is src's values in dst's shape (maximum's backward)
    if _grad_first(target) and isinstance(node.args[0], fx.Node) and node.args[0] in zeros:
        return _ZERO  # an op's backward is linear in the gradient it is given
    if packet in (aten.add, aten.sub) and len(tensors) == 2 and node.args[0] is not node.args[1]:
        return _drop_zero_term(node, zeros, env, graph)
    return None


def _drop_zero_term(node: fx.Node, zeros: set[fx.Node], env: dict, graph: fx.Graph):
    """a + 0 and a - 0 are a; 0 + b is b times alpha; 0 - b is -b times alpha. A new node only
    where the term's shape or dtype is not the sum's (then expand or cast it)."""
    a, b = node.args[0], node.args[1]
    alpha = node.kwargs.get("alpha", 1)
    if b in zeros:
        term, scale = a, 1
    else:
        term, scale = b, (alpha if node.target.overloadpacket is aten.add else -alpha)
    out, val = node.meta.get("val"), term.meta.get("val")
    if not (isinstance(out, torch.Tensor) and isinstance(val, torch.Tensor)):
        return None
    new = env[term]
    if val.dtype != out.dtype:
        return None  # type promotion: keep the op with a zeros tensor
    if scale != 1:
        new = graph.call_function(aten.mul.Tensor, (new, scale))
        new.meta["val"] = val * scale
    if tuple(val.shape) != tuple(out.shape):
        source = new
        new = graph.call_function(aten.expand.default, (source, list(out.shape)))
        new.meta["val"] = source.meta["val"].expand(out.shape)
    return new


def _grad_first(target) -> bool:
    """``*_backward`` ops whose first argument is the incoming gradient (threshold_backward,
    native_layer_norm_backward, convolution_backward, the attention backwards, ...): every output
    is linear in it."""
    name = target.__name__.split(".")[0]
    if not name.endswith(("_backward", "_backward_data")):
        return False
    args = target._schema.arguments
    return bool(args) and args[0].name.startswith("grad")


def _is_zero_fill(node) -> bool:
    """A zeros tensor the graph makes itself (a select/slice backward's base, the zero that
    ``clamp``'s and ``relu``'s backward ``where`` picks outside the mask)."""
    if not isinstance(node, fx.Node) or node.op != "call_function":
        return False
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target.overloadpacket in _ZERO_FILLS:
        return True
    if target.overloadpacket is aten.scalar_tensor:  # where(mask, grad, 0)'s other branch
        return len(node.args) > 0 and node.args[0] == 0
    fills = (aten.full, aten.new_full, aten.full_like)
    return target.overloadpacket in fills and len(node.args) > 1 and node.args[1] == 0


def _is_float(node: fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.is_floating_point()


def _flat_args(node: fx.Node) -> list:
    out: list = []
    fx.node.map_aggregate((node.args, node.kwargs), out.append)
    return out


def _zeros_like_node(graph: fx.Graph, old: fx.Node) -> fx.Node:
    """aten.full(shape, 0) standing for the zero ``old`` (contiguous, of its dtype and device)."""
    val = old.meta.get("val")
    if not isinstance(val, torch.Tensor) or free_symbols(val):
        raise CannotSpecialise(f"{old.name}: a zeros tensor of symbolic size")
    node = graph.call_function(
        aten.full.default,
        (list(val.shape), 0),
        {"dtype": val.dtype, "layout": torch.strided, "device": val.device, "pin_memory": False},
    )
    mode = getattr(val, "fake_mode", None)
    if mode is not None:
        with mode:
            node.meta["val"] = torch.full(list(val.shape), 0, dtype=val.dtype, device=val.device)
    else:
        node.meta["val"] = torch.zeros(val.shape, dtype=val.dtype, device="meta")
    return node


__all__ = ["CannotSpecialise", "SpecialisedBackward", "without_tangents"]
