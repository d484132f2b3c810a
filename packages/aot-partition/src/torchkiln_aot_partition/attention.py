"""Hand-written attention in an inference ATen graph, routed to ``scaled_dot_product_attention``.

Models write attention as ``softmax(q @ k.transpose(-2, -1) * s + mask) @ v``. Traced by make_fx
with loop-ir's table that is two ``bmm``s (with the expand/view/clone nodes ``@`` on 4-D tensors
becomes), a scale, an optional mask and a decomposed softmax; loop-ir then writes the attention
weights (batch x heads x L x S) to memory and reads them back. ``fuse_attention`` recognises the
pattern and puts one ``aten.scaled_dot_product_attention`` node in its place; the graph is traced
again afterwards, so torch's own dispatcher picks the kernel (flash on CPU; flash, efficient or
cuDNN on CUDA) and its input conversions, exactly as in eager. When it picks no kernel (its math
fallback) ``aot_compile`` keeps the graph as written (``_route_attention`` in api.py).

A rewrite happens only when every check passes, and each refusal carries its reason:

- the scores are ``bmm(q, k^T)`` viewed to 4-D (batch, heads, L, S): 3-D attention is left alone;
- the scale is a Python number (``mul`` by it, or ``div`` by it); none means scale 1;
- the mask is ``where(mask, -inf, scores)`` (``masked_fill``) with a boolean ``mask``, or
  ``scores + mask`` with a floating ``mask`` of the scores' dtype; either broadcasts to the scores
  without widening them. A boolean mask that is a compile-time constant equal to
  ``ones(L, S).triu(1)`` becomes ``is_causal=True`` (no mask read at all);
- softmax is over the last dim (``_softmax``, or its decomposition amax/sub/exp/sum/div, with the
  float32 round trip of 16-bit inputs);
- q, k, v, the scores and the weights share one floating dtype;
- every intermediate (scores, weights) has no user outside the pattern: attention weights that
  are returned or reused stay as written.

Eager's softmax of a row that is entirely ``-inf`` is NaN; SDPA returns zeros there. So a mask
that is not the causal constant gets a guard in the graph: rows the mask removes entirely
(``all(mask, -1)``, or ``all(mask == -inf, -1)`` for an additive mask) are set to NaN, as eager
gives. Only the inference path is rewritten: on the training path the joint graph is traced from
the torch-level graph, and rewriting its forward alone would leave a backward that no longer
matches (dropout in attention is therefore not rewritten either; a dropout between softmax and
the second matmul simply does not match).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
from torch import fx

aten = torch.ops.aten
prims = torch.ops.prims

_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_FLOATS = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


@dataclass
class AttentionStats:
    """What ``fuse_attention`` did: one line per rewrite, one per refusal with its reason."""

    fused: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


class _NoMatch(Exception):
    """This softmax is not rewritten; the message is the human reason."""


def _is(node, *targets) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets


def _val(node):
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    if not isinstance(val, torch.Tensor):
        raise _NoMatch(f"{node} has no tensor value")
    return val


def _is_cast(node) -> bool:
    """A pure dtype conversion (the float32 round trip of a 16-bit softmax)."""
    if _is(node, prims.convert_element_type.default):
        return True
    return (
        _is(node, aten._to_copy.default) and set(node.kwargs) <= {"dtype"} and len(node.args) == 1
    )


def _last_dim(dims, ndim: int) -> bool:
    if isinstance(dims, int):
        dims = [dims]
    return list(dims) in ([-1], [ndim - 1])


def _softmax_input(probs: fx.Node, nodes: set) -> fx.Node:
    """The node softmax is taken of, adding the softmax's own nodes to ``nodes``."""
    p = probs
    cast_out = _is_cast(p)
    if cast_out:
        nodes.add(p)
        p = p.args[0]
    ndim = _val(p).dim()
    if _is(p, aten._softmax.default):
        if not _last_dim(p.args[1], ndim) or p.args[2]:
            raise _NoMatch("softmax is not over the last dim")
        nodes.add(p)
        x = p.args[0]
    else:
        if not _is(p, aten.div.Tensor):
            raise _NoMatch("the second matmul's left operand is not a softmax")
        exp, total = p.args
        if not (
            _is(exp, aten.exp.default)
            and _is(total, aten.sum.dim_IntList)
            and total.args[0] is exp
            and len(total.args) >= 3
            and total.args[2]
        ):
            raise _NoMatch("the second matmul's left operand is not a softmax")
        sub = exp.args[0]
        if not _is(sub, aten.sub.Tensor) or not _is(sub.args[1], aten.amax.default):
            raise _NoMatch("the second matmul's left operand is not a softmax")
        x, amax = sub.args
        if amax.args[0] is not x or not (len(amax.args) >= 3 and amax.args[2]):
            raise _NoMatch("the second matmul's left operand is not a softmax")
        if not (_last_dim(total.args[1], ndim) and _last_dim(amax.args[1], ndim)):
            raise _NoMatch("softmax is not over the last dim")
        nodes.update((p, exp, total, sub, amax))
    if _is_cast(x) != cast_out:
        raise _NoMatch("softmax converts its input and output to different dtypes")
    if cast_out:
        if _val(x).dtype != torch.float32:
            raise _NoMatch("softmax computed in a dtype other than float32")
        nodes.add(x)
        x = x.args[0]
    return x


def _fill_value(node) -> float | None:
    """The value of a 0-d constant node (``scalar_tensor(v)`` / ``full([], v)``), else None."""
    if _is(node, aten.scalar_tensor.default):
        return node.args[0]
    if _is(node, aten.full.default) and list(node.args[0]) == []:
        return node.args[1]
    return None


def _peel(node: fx.Node, shape: list[int]) -> fx.Node | None:
    """The 4-D tensor a bmm operand was made from (view of [clone of] an expand that does not
    broadcast), or None."""
    if not _is(node, *_VIEWS):
        return None
    inner = node.args[0]
    if _is(inner, aten.clone.default):
        inner = inner.args[0]
    if not _is(inner, aten.expand.default):
        return None
    source = inner.args[0]
    if list(_val(source).shape) != list(shape) or list(inner.args[1]) != list(shape):
        return None
    return source


def _scores_chain(node) -> bool:
    """Whether ``node`` is a bmm viewed to 4-D, optionally scaled by a number (the scores)."""
    if _is(node, aten.mul.Tensor, aten.div.Tensor):
        node = node.args[0]
    return _is(node, *_VIEWS) and _is(node.args[0], aten.bmm.default)


def _constant_value(graph: fx.Graph, node: fx.Node) -> torch.Tensor | None:
    """``node``'s value when it depends on no input and no random op (run now), else None."""
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        if n.op != "call_function" or n.is_impure():
            return None
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
            return None  # random: a value now is not its value at run time
        seen.add(n)
        stack.extend(n.all_input_nodes)
    order = [n for n in graph.nodes if n in seen]
    sub = fx.Graph()
    env: dict = {}
    for n in order:
        env[n] = sub.node_copy(n, lambda a: env[a])
    sub.output(env[node])
    try:
        value = fx.GraphModule(torch.nn.Module(), sub)()
    except Exception:  # noqa: BLE001 - a constant we cannot evaluate is simply not constant
        return None
    return value if isinstance(value, torch.Tensor) else None


def _is_causal(graph: fx.Graph, mask: fx.Node, length: int, source: int) -> bool:
    value = _constant_value(graph, mask)
    if value is None or value.dtype != torch.bool or value.dim() < 2:
        return False
    if tuple(value.shape[-2:]) != (length, source) or any(s != 1 for s in value.shape[:-2]):
        return False
    causal = torch.ones(length, source, dtype=torch.bool, device=value.device).triu(1)
    return bool(torch.equal(value.reshape(length, source), causal))


@dataclass
class _Match:
    bmm2: fx.Node
    q: fx.Node | None
    k_t: fx.Node | None  # k transposed, (..., E, S)
    a: fx.Node  # the bmm operands, for views when the 4-D sources cannot be peeled
    b: fx.Node
    v3: fx.Node
    batch: list[int]
    scale: float
    mask: fx.Node | None
    mask_kind: str  # "", "fill" (boolean, True removes), "add" (additive float)
    nodes: set


def _match(bmm2: fx.Node) -> _Match:
    nodes: set = {bmm2}
    p3, v3 = bmm2.args
    if not _is(p3, *_VIEWS):
        raise _NoMatch("the second matmul's left operand is not a view of 4-D weights")
    nodes.add(p3)
    inner = p3.args[0]
    if _is(inner, aten.clone.default):
        nodes.add(inner)
        inner = inner.args[0]
    if _is(inner, aten.expand.default):
        if list(inner.args[1]) != list(_val(inner.args[0]).shape):
            raise _NoMatch("the attention weights are broadcast")
        nodes.add(inner)
        inner = inner.args[0]
    probs = inner
    if _val(probs).dim() != 4:
        raise _NoMatch("attention weights are not 4-D")
    nodes.add(probs)
    x = _softmax_input(probs, nodes)
    nodes.add(x)
    dtype = _val(x).dtype
    if dtype not in _FLOATS:
        raise _NoMatch(f"scores of dtype {dtype}")
    mask, kind = None, ""
    scores = x
    if _is(x, aten.where.self) and _fill_value(x.args[1]) == -math.inf:
        mask, kind, scores = x.args[0], "fill", x.args[2]
        nodes.add(x.args[1])
        if _val(mask).dtype != torch.bool:
            raise _NoMatch("masked_fill's mask is not boolean")
    elif _is(x, aten.masked_fill.Scalar) and x.args[2] == -math.inf:
        mask, kind, scores = x.args[1], "fill", x.args[0]
        if _val(mask).dtype != torch.bool:
            raise _NoMatch("masked_fill's mask is not boolean")
    elif _is(x, aten.masked_fill.Scalar, aten.where.self):
        raise _NoMatch(
            "the mask fills another value than -inf (a finite fill is not an additive mask)"
        )
    elif _is(x, aten.add.Tensor) and len(x.args) == 2 and not x.kwargs:
        first, second = x.args
        if not isinstance(second, fx.Node) or not isinstance(first, fx.Node):
            raise _NoMatch("scores plus a number is not a mask")
        if _scores_chain(second) and not _scores_chain(first):
            first, second = second, first
        scores, mask, kind = first, second, "add"
        if _val(mask).dtype != dtype:
            raise _NoMatch("the additive mask's dtype differs from the scores'")
    if mask is not None:
        shape = list(_val(scores).shape)
        try:
            broadcast = list(torch.broadcast_shapes(tuple(_val(mask).shape), tuple(shape)))
        except RuntimeError:
            raise _NoMatch("the mask does not broadcast to the scores") from None
        if broadcast != shape or list(_val(x).shape) != shape:
            raise _NoMatch("the mask widens the scores")
    scale = 1.0
    if (
        _is(scores, aten.mul.Tensor)
        and isinstance(scores.args[1], (int, float))
        and not isinstance(scores.args[1], bool)
    ):
        scale = float(scores.args[1])
        nodes.add(scores)
        scores = scores.args[0]
    elif (
        _is(scores, aten.div.Tensor)
        and isinstance(scores.args[1], (int, float))
        and not isinstance(scores.args[1], bool)
        and scores.args[1] != 0
    ):
        scale = 1.0 / float(scores.args[1])
        nodes.add(scores)
        scores = scores.args[0]
    if not math.isfinite(scale):
        raise _NoMatch("the scale is not finite")
    if not _is(scores, *_VIEWS) or not _is(scores.args[0], aten.bmm.default):
        raise _NoMatch("the scores are not a matmul viewed to 4-D")
    bmm1 = scores.args[0]
    nodes.update((scores, bmm1))
    shape4 = list(_val(scores).shape)
    if len(shape4) != 4:
        raise _NoMatch("the scores are not 4-D")
    a, b = bmm1.args
    batch, (length, source) = shape4[:2], shape4[2:]
    bsz = batch[0] * batch[1]
    qv, kv, vv = _val(a), _val(b), _val(v3)
    if list(_val(bmm1).shape) != [bsz, length, source] or kv.shape[0] != bsz or vv.shape[0] != bsz:
        raise _NoMatch("the matmuls' batch does not match the scores")
    if vv.shape[1] != source or list(_val(bmm2).shape) != [bsz, length, vv.shape[2]]:
        raise _NoMatch("the second matmul's shapes do not match the scores")
    if len({qv.dtype, kv.dtype, vv.dtype, dtype, _val(probs).dtype}) != 1:
        raise _NoMatch("q, k, v, scores and weights differ in dtype")
    if qv.device != kv.device or qv.device != vv.device:
        raise _NoMatch("q, k, v on different devices")
    q = _peel(a, batch + [length, qv.shape[2]])
    k_t = _peel(b, batch + [kv.shape[1], source])
    # every intermediate computed from the scores must be read only inside the pattern; a
    # constant the pattern reads (the masked fill's -inf) may be shared: common-subexpression
    # elimination (cse.py) gives every layer's mask one scalar_tensor
    from_scores, stack = {bmm1}, [bmm1]
    while stack:
        for user in stack.pop().users:
            if user in nodes and user not in from_scores:
                from_scores.add(user)
                stack.append(user)
    for node in from_scores - {bmm2}:
        outside = [u for u in node.users if u not in nodes]
        if outside:
            raise _NoMatch(
                f"{node.name} is also read by {outside[0].name} (the attention weights or "
                "scores are used elsewhere)"
            )
    return _Match(bmm2, q, k_t, a, b, v3, batch, scale, mask, kind, nodes)


def _emit(graph: fx.Graph, m: _Match, causal: bool) -> str:
    call = graph.call_function
    qv, kv, vv = _val(m.a), _val(m.b), _val(m.v3)
    bsz, length, head = qv.shape
    source = kv.shape[2]
    with graph.inserting_before(m.bmm2):
        q = m.q if m.q is not None else call(aten.view.default, (m.a, m.batch + [length, head]))
        k_t = (
            m.k_t if m.k_t is not None else call(aten.view.default, (m.b, m.batch + [head, source]))
        )
        k = call(aten.transpose.int, (k_t, -2, -1))
        v = m.v3
        v_inner = m.v3.args[0] if _is(m.v3, *_VIEWS) else None
        v4 = _peel(m.v3, m.batch + [source, vv.shape[2]]) if v_inner is not None else None
        v = (
            v4
            if v4 is not None
            else call(aten.view.default, (m.v3, m.batch + [source, vv.shape[2]]))
        )
        kwargs: dict = {"scale": m.scale}
        if causal:
            kwargs["is_causal"] = True
        elif m.mask_kind == "fill":
            kwargs["attn_mask"] = call(aten.logical_not.default, (m.mask,))
        elif m.mask_kind == "add":
            kwargs["attn_mask"] = m.mask
        out = call(aten.scaled_dot_product_attention.default, (q, k, v), kwargs)
        if m.mask is not None and not causal:
            # SDPA gives zeros for a row the mask removes entirely, eager's softmax NaN
            removed = m.mask if m.mask_kind == "fill" else call(aten.eq.Scalar, (m.mask, -math.inf))
            dead = call(aten.all.dim, (removed, -1, True))
            nan = call(
                aten.scalar_tensor.default, (math.nan,), {"dtype": qv.dtype, "device": qv.device}
            )
            out = call(aten.where.self, (dead, nan, out))
    users = list(m.bmm2.users)
    target = m.batch + [length, vv.shape[2]]
    if len(users) == 1 and _is(users[0], *_VIEWS) and list(_val(users[0]).shape) == target:
        users[0].replace_all_uses_with(out)
    else:
        with graph.inserting_before(m.bmm2):
            flat = call(aten.reshape.default, (out, [bsz, length, vv.shape[2]]))
        m.bmm2.replace_all_uses_with(flat)
    mask = (
        "causal"
        if causal
        else {"": "no mask", "fill": "boolean mask", "add": "additive mask"}[m.mask_kind]
    )
    return (
        f"{m.bmm2.name}: attention {m.batch + [length, source]} head {head}, scale {m.scale:.6g}, "
        f"{mask} -> scaled_dot_product_attention"
    )


def fuse_attention(gm: fx.GraphModule) -> AttentionStats:
    """Rewrite each hand-written attention of ``gm`` (an inference ATen graph with static shapes
    and ``meta["val"]`` on every node) into ``aten.scaled_dot_product_attention``, in place.

    The new nodes carry no ``meta["val"]``: the caller traces the graph again (see
    ``aot_compile``), which also drops the nodes the rewrite left unused. Returns what was done.
    """
    stats = AttentionStats()
    graph = gm.graph
    for node in list(graph.nodes):
        if not _is(node, aten.bmm.default):
            continue
        try:
            m = _match(node)
        except _NoMatch as reason:
            if _reads_softmax(node):
                stats.refused.append(f"{node.name}: {reason}")
            continue
        causal = False
        if m.mask_kind == "fill":
            length, source = _val(m.a).shape[1], _val(m.b).shape[2]
            causal = _is_causal(graph, m.mask, length, source)
        stats.fused.append(_emit(graph, m, causal))
    if stats.fused:
        graph.lint()
        gm.recompile()
    return stats


def _reads_softmax(bmm: fx.Node) -> bool:
    """Whether ``bmm``'s left operand comes from something softmax-like (refusals worth a line)."""
    seen, frontier = 0, [bmm.args[0]]
    while frontier and seen < 8:
        n = frontier.pop()
        seen += 1
        if _is(n, aten._softmax.default, aten.div.Tensor) and (
            n.target is aten._softmax.default or _is(n.args[0], aten.exp.default)
        ):
            return True
        if isinstance(n, fx.Node) and n.op == "call_function" and n.target is not operator.getitem:
            frontier.extend(n.all_input_nodes[:1])
    return False


__all__ = ["AttentionStats", "fuse_attention"]
