"""Attention masks computed from no input, passed to ``scaled_dot_product_attention``, simplified.

Hugging Face models build their attention mask inside ``forward``. Run eagerly, with no padding,
they pass no mask at all (``is_causal=True`` for a decoder); under a compiler (``is_compiling()``
answers True, as it must for code that branches on it) they materialise it: Llama's and GPT-2's
causal mask as a boolean (batch, 1, L, S) tensor from ``arange`` comparisons, BERT's padding mask
of all ones when no ``attention_mask`` is given. The fused kernels then read that mask, and a
causal one computes every block of the scores instead of skipping those above the diagonal:
Llama (8 layers of width 1024, 8 x 1024 tokens) spent 10.1 ms in the memory-efficient kernel on
the H200 in float32, eager 4.9 ms with ``is_causal``. Both compilers paid it (torch.compile
9.8 ms).

``simplify_sdpa_masks(gm)`` runs on the torch-level graph, before any trace (so the inference
trace and the joint forward+backward both see the simpler call). For each
``scaled_dot_product_attention`` call with a mask and ``is_causal=False``, when the mask depends
on no placeholder, no ``get_attr`` (a buffer may change between calls) and no random op, its
subgraph is run now and its value decides:

- every position kept (a boolean mask of all True, a float mask of all zeros): no mask;
- the lower triangle kept for every batch and head, the rest removed (False, or a float at most
  half of its dtype's lowest value, or -inf), with the last two dims square: no mask and
  ``is_causal=True``. The row's own diagonal is kept, so no row is removed entirely and the
  removed positions weigh exactly 0 both ways.

Anything else (a mask from an input, symbolic sizes, a value that is neither) is left as it is.
The mask's nodes that nothing else reads are removed. One line per decision goes to
``gm.meta["sdpa_masks"]``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from ._masked_attention import _NAMES, _SDPA

#: name fragments of random ops: their value now is not their value at run time
_RANDOM = ("rand", "bernoulli", "normal", "uniform", "dropout", "multinomial", "exponential")
#: the largest mask evaluated at compile time (elements, after broadcast dims are dropped)
MAX_ELEMENTS = 1 << 28


def _target_name(node: fx.Node) -> str:
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


def input_free_value(graph: fx.Graph, node: fx.Node) -> Any:
    """``node``'s value, computed now, when it depends on no placeholder, ``get_attr`` or random
    op (call_function and call_method nodes only); None otherwise or when it fails to run."""
    seen: set[fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        if n.op not in ("call_function", "call_method"):
            return None
        name = _target_name(n).lower()
        if any(word in name for word in _RANDOM):
            return None
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
            return None
        seen.add(n)
        stack.extend(n.all_input_nodes)
    env: dict[fx.Node, Any] = {}
    try:
        with torch.no_grad():
            for n in graph.nodes:
                if n not in seen:
                    continue
                args = fx.node.map_arg(n.args, env.__getitem__)
                kwargs = fx.node.map_arg(n.kwargs, env.__getitem__)
                if n.op == "call_method":
                    env[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
                else:
                    env[n] = n.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - a value we cannot compute now is simply not constant
        return None
    return env[node]


def _without_broadcast(value: torch.Tensor) -> torch.Tensor:
    """``value`` with each expanded dim (stride 0) narrowed to one element: the same values."""
    for dim in range(value.dim()):
        if value.stride(dim) == 0 and value.shape[dim] > 1:
            value = value.narrow(dim, 0, 1)
    return value


def _kept(value: torch.Tensor) -> torch.Tensor | None:
    """Which positions ``value`` keeps, when every position is either kept or removed outright
    (boolean: True keeps; float: 0 keeps, -inf or at most half the dtype's lowest removes)."""
    if value.dtype == torch.bool:
        return value
    if not value.is_floating_point():
        return None
    kept = value == 0
    removed = value <= torch.finfo(value.dtype).min / 2
    return kept if bool((kept | removed).all()) else None


def _example(node: Any) -> torch.Tensor | None:
    value = node.meta.get("example_value") if isinstance(node, fx.Node) else None
    return value if isinstance(value, torch.Tensor) else None


def _decide(graph: fx.Graph, mask: fx.Node, q: Any, k: Any) -> tuple[str, str]:
    """("none" | "causal" | "", why) for one call's mask. The query and key lengths come from
    their example values where the graph has them (capture's graphs do); otherwise from the
    mask itself, whose last two dims, where not 1, are those lengths (the call ran at capture
    time, so the mask broadcasts)."""
    qv, kv = _example(q), _example(k)
    lengths = (qv.shape[-2], kv.shape[-2]) if qv is not None and kv is not None else None
    if lengths is not None and not all(isinstance(n, int) for n in lengths):
        return "", "symbolic sequence lengths"
    example = _example(mask)
    numel = example.numel() if example is not None else None
    if not isinstance(numel, (int, type(None))):
        return "", "a mask of symbolic size"
    if numel is not None and numel > 4 * MAX_ELEMENTS:
        return "", f"a mask of {numel} elements"  # not computed at compile time
    value = input_free_value(graph, mask)
    if not isinstance(value, torch.Tensor):
        return "", "the mask depends on an input, a buffer or a random op"
    if value.dim() < 2:
        return "", f"a mask of {value.dim()} dims"
    if qv is not None:
        if value.dim() > qv.dim() or any(
            got not in (1, want)
            for got, want in zip(reversed(value.shape[:-2]), reversed(qv.shape[:-2]))
        ):
            return "", f"mask shape {tuple(value.shape)} does not broadcast to the query's"
    length, source = lengths if lengths is not None else tuple(value.shape[-2:])
    if value.shape[-2] not in (1, length) or value.shape[-1] not in (1, source):
        return "", f"mask shape {tuple(value.shape)} does not broadcast to ({length}, {source})"
    value = _without_broadcast(value)
    if value.numel() > MAX_ELEMENTS:
        return "", f"a mask of {value.numel()} elements"
    kept = _kept(value)
    if kept is None:
        return "", "the mask has values other than 0 and -inf"
    if bool(kept.all()):
        return "none", "every position kept"
    if length != source or tuple(value.shape[-2:]) != (length, source):
        return "", "not every position kept, and not a square mask"
    rows = kept.reshape(-1, length, source)
    causal = torch.ones(length, source, dtype=torch.bool, device=kept.device).tril()
    if bool(torch.equal(rows, causal.expand(rows.shape))):
        return "causal", "the lower triangle kept"
    return "", "neither all kept nor causal"


def _erase_unused(graph: fx.Graph, start: fx.Node) -> None:
    """Erase ``start`` and its inputs, transitively, once nothing reads them (pure nodes only:
    those ``input_free_value`` accepted)."""
    stack = [start]
    while stack:
        n = stack.pop()
        if n.graph is not graph or n.users or n.op not in ("call_function", "call_method"):
            continue
        inputs = n.all_input_nodes
        graph.erase_node(n)
        stack.extend(inputs)


def simplify_sdpa_masks(gm: fx.GraphModule) -> list[str]:
    """Drop the input-free masks of ``gm``'s ``scaled_dot_product_attention`` calls that keep
    everything, and turn causal ones into ``is_causal=True`` (module docstring). In place;
    returns one line per call with a mask."""
    lines: list[str] = []
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _SDPA:
            continue
        bound = dict(zip(_NAMES, node.args))
        bound.update(node.kwargs)
        mask = bound.get("attn_mask")
        if not isinstance(mask, fx.Node):
            continue
        if bound.get("is_causal", False) is not False:
            lines.append(f"{node.name}: kept its mask (is_causal is set too)")
            continue
        kind, why = _decide(graph, mask, bound.get("query"), bound.get("key"))
        if not kind:
            lines.append(f"{node.name}: kept its mask ({why})")
            continue
        bound["attn_mask"] = None
        if kind == "causal":
            bound["is_causal"] = True
        positional = min(len(node.args), 3)
        node.args = tuple(bound.pop(name) for name in _NAMES[:positional])
        node.kwargs = bound
        _erase_unused(graph, mask)
        lines.append(
            f"{node.name}: mask dropped ({why})" + (", is_causal=True" if kind == "causal" else "")
        )
    if any("dropped" in line for line in lines):
        graph.lint()
        gm.recompile()
    gm.meta["sdpa_masks"] = lines
    return lines


__all__ = ["input_free_value", "simplify_sdpa_masks"]
