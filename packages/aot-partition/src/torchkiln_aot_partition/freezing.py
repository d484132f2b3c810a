"""Inference-time folding of frozen parameters: batch norm into convolution, weight-only subgraphs.

On the inference path (no autograd), everything a graph computes from its lifted parameters and
buffers alone is the same on every call until a parameter changes. ``freeze`` rewrites the ATen
graph once, at compile time:

1. **Affine epilogues into convolution.** A convolution whose only user multiplies, divides,
   adds or subtracts a per-output-channel constant (eval batch norm: ``(y - mean) * rsqrt(var +
   eps) * w + b``) gets that constant folded into its weight and bias, step by step, so the
   batch norm disappears from the graph.
2. **Constant folding.** Every node computed from parameters alone (the folded weights and
   biases above, ``rsqrt(var + eps)``, a transposed weight) moves to a separate *constant graph*;
   the main graph takes the constant graph's results as extra trailing inputs.

The runtime (``FoldedConstants``) runs the constant graph eagerly, once, and again whenever one
of the tensors it reads changed: its key is each source tensor's version counter (bumped by
every in-place update: ``load_state_dict``, ``p.mul_(2)``, an optimizer step) and data pointer
(``p.data = other``). So a folded constant is never stale: a mutated weight is folded again
before the next call uses it.

Not folded, each for a reason: parameters the graph itself mutates (train-mode batch norm's
running stats change on every call); inputs that are not parameters; random ops; values that
only view a parameter (nothing to save); values larger than the parameters they come from (an
``expand`` materialised); values the graph returns, or views of them (a caller could then
write into the cache); inference tensors (they have no version counter to guard on); symbolic
sizes.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from .errors import AOTError

aten = torch.ops.aten

#: ops that only reinterpret their input's memory: a boundary made of these folds nothing
_VIEWS = {
    aten.view.default,
    aten.reshape.default,
    aten._unsafe_view.default,
    aten.expand.default,
    aten.permute.default,
    aten.t.default,
    aten.transpose.int,
    aten.slice.Tensor,
    aten.select.int,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.alias.default,
    aten.as_strided.default,
    aten.detach.default,
}
_AFFINE = (aten.mul.Tensor, aten.div.Tensor, aten.add.Tensor, aten.sub.Tensor)


class FoldedConstantsChanged(AOTError):
    """A parameter changed shape, dtype or layout after its constants were folded (``p.data =
    a tensor of another shape``): the compiled graph no longer fits it."""


@dataclass(frozen=True)
class FreezeStats:
    """What ``freeze`` did, for reports: convolutions that absorbed an affine epilogue, folded
    constants, and the reasons values stayed in the main graph."""

    folded_epilogues: int = 0
    constants: int = 0
    kept: tuple[str, ...] = ()


@dataclass
class FoldedConstants:
    """The constant graph and its cache: ``values(graph_args)`` -> the folded tensors, appended
    after the main graph's own inputs.

    ``sources`` are the positions in the graph arguments the constant graph reads; ``metas`` the
    (shape, stride, dtype) the main graph was compiled for.
    """

    graph: fx.GraphModule
    sources: tuple[int, ...]
    metas: tuple[tuple[Any, ...], ...]
    _key: tuple | None = field(default=None, repr=False, compare=False)
    _values: list[torch.Tensor] | None = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def key(self, args: Sequence[Any]) -> tuple:
        """Every source tensor's version counter, then every one's data pointer. Read with C
        loops (``map`` of a getter) on every call: the Python loop this replaces cost ~0.3 us per
        source, 60 us per call of a net with 200 folded parameters."""
        sources = self._pick(args)
        return (*map(_VERSION, sources), *map(_DATA_PTR, sources))

    @property
    def _pick(self) -> Callable[[Sequence[Any]], tuple]:
        """``args -> (args[i] for i in sources)`` as a tuple, built once."""
        pick = self.__dict__.get("_picker")
        if pick is None:
            if len(self.sources) == 1:
                (i,) = self.sources
                pick = lambda args: (args[i],)  # noqa: E731 - itemgetter of one index returns no tuple
            else:
                pick = operator.itemgetter(*self.sources) if self.sources else (lambda args: ())
            self.__dict__["_picker"] = pick
        return pick

    def values(self, args: Sequence[Any]) -> list[torch.Tensor]:
        key = self.key(args)
        if key == self._key and self._values is not None:
            return self._values
        with self._lock:
            with torch.no_grad():
                values = list(self.graph(*[args[i] for i in self.sources]))
                for k, (v, meta) in enumerate(zip(values, self.metas)):
                    if _meta(v) != meta:
                        raise FoldedConstantsChanged(
                            f"folded constant {k} is {_meta(v)}, the graph was compiled for "
                            f"{meta}: a parameter changed shape, dtype or layout after compiling"
                        )
                if self._values is not None:
                    # refold in place: the tensors keep their memory, which a recorded CUDA
                    # graph reads at replay (and their identity, which oneDNN's packed-weight
                    # cache is keyed by; copy_ bumps their version, so it repacks)
                    for old, new in zip(self._values, values):
                        old.copy_(new)
                    values = self._values
            self._values, self._key = values, key
        return values

    def nbytes(self) -> int:
        """Bytes the folded constants hold beside the parameters (0 before the first fold)."""
        return sum(
            v.untyped_storage().nbytes() for v in {id(v): v for v in self._values or ()}.values()
        )

    def prime(self, args: Sequence[Any], values: list[torch.Tensor]) -> None:
        """Start the cache with the values computed at compile time from ``args``."""
        self._key, self._values = self.key(args), values

    def __getstate__(self) -> dict:
        return {"graph": self.graph, "sources": self.sources, "metas": self.metas}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["graph"], state["sources"], state["metas"])


_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch.Tensor.data_ptr


def _meta(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _is_static(val: Any) -> bool:
    return isinstance(val, torch.Tensor) and all(
        isinstance(s, int) for s in (*val.shape, *val.stride())
    )


def _fake_mode(graph: fx.Graph) -> Any:
    for n in graph.nodes:
        mode = getattr(_val(n), "fake_mode", None)
        if mode is not None:
            return mode
    raise AOTError("freezing needs FakeTensor meta['val'] on the graph's nodes")


class _Graph:
    """The main graph, with which nodes are constant (computed from parameters alone)."""

    def __init__(self, gm: fx.GraphModule, frozen: set[int]) -> None:
        self.gm, self.graph = gm, gm.graph
        self.fake_mode = _fake_mode(gm.graph)
        self.placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self.const: set[fx.Node] = {p for i, p in enumerate(self.placeholders) if i in frozen}
        for n in self.graph.nodes:
            if n.op == "call_function" and self._computable(n):
                self.const.add(n)

    def _computable(self, n: fx.Node) -> bool:
        if isinstance(n.target, torch._ops.OpOverload) and (
            torch.Tag.nondeterministic_seeded in n.target.tags
        ):
            return False
        inputs = n.all_input_nodes
        return (
            bool(inputs)
            and all(i in self.const for i in inputs)
            and (n.target is operator.getitem or isinstance(n.target, torch._ops.OpOverload))
        )

    def add(self, target: Any, args: tuple, before: fx.Node) -> fx.Node:
        """Insert ``target(*args)`` before ``before``, with its meta['val'] computed on fakes."""
        with self.graph.inserting_before(before):
            node = self.graph.call_function(target, args)
        fake_args = torch.utils._pytree.tree_map(
            lambda a: _val(a) if isinstance(a, fx.Node) else a, args
        )
        with self.fake_mode:
            node.meta["val"] = target(*fake_args)
        if all(i in self.const for i in node.all_input_nodes):
            self.const.add(node)
        return node


def _per_channel(g: _Graph, other: Any, y: torch.Tensor, before: fx.Node) -> fx.Node | float | None:
    """``other`` as a [C] vector over the convolution output ``y``'s channels, or a Python
    number, or None when it is not a per-output-channel constant of y's dtype."""
    if isinstance(other, (int, float)) and not isinstance(other, bool):
        return float(other)
    if not isinstance(other, fx.Node) or other not in g.const:
        return None
    val = _val(other)
    if not _is_static(val) or val.dtype != y.dtype or val.dim() > y.dim():
        return None
    shape = [1] * (y.dim() - val.dim()) + list(val.shape)
    channels = y.shape[1]
    if any(s != 1 for d, s in enumerate(shape) if d != 1) or shape[1] not in (1, channels):
        return None
    flat = g.add(aten.view.default, (other, [val.numel()]), before)
    if shape[1] == 1:
        flat = g.add(aten.expand.default, (flat, [channels]), before)
    return flat


def _fold_affine_epilogue(g: _Graph, conv: fx.Node) -> fx.Node | None:
    """Fold the only user of ``conv``, when it is an affine op with a per-channel constant, into
    the convolution's weight and bias; returns the new convolution node, or None."""
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = conv.args
    if transposed or weight not in g.const or (bias is not None and bias not in g.const):
        return None
    if len(conv.users) != 1:
        return None
    user = next(iter(conv.users))
    if user.op != "call_function" or user.target not in _AFFINE or user.kwargs:
        return None
    y, out = _val(conv), _val(user)
    if not (_is_static(y) and _is_static(out)) or out.shape != y.shape or out.dtype != y.dtype:
        return None
    a, b = user.args
    if a is conv and b is not conv:
        other = b
    elif b is conv and user.target in (aten.mul.Tensor, aten.add.Tensor):
        other = a  # commutative
    else:
        return None
    scale = _per_channel(g, other, y, user)
    if scale is None:
        return None
    if user.target in (aten.mul.Tensor, aten.div.Tensor):
        op = user.target
        if isinstance(scale, float):
            new_w = g.add(op, (weight, scale), user)
        else:
            shape = [y.shape[1]] + [1] * (_val(weight).dim() - 1)
            new_w = g.add(op, (weight, g.add(aten.view.default, (scale, shape), user)), user)
        new_b = None if bias is None else g.add(op, (bias, scale), user)
    else:
        new_w = weight
        if bias is not None:
            new_b = g.add(user.target, (bias, scale), user)
        elif isinstance(scale, float):
            full = g.add(aten.full.default, ([y.shape[1]], 0.0), user)
            new_b = g.add(user.target, (full, scale), user)
        else:
            new_b = (
                scale if user.target is aten.add.Tensor else g.add(aten.neg.default, (scale,), user)
            )
        if new_b is not None and _val(new_b).dtype != y.dtype:
            return None
    new_conv = g.add(
        aten.convolution.default,
        (x, new_w, new_b, stride, padding, dilation, transposed, output_padding, groups),
        user,
    )
    user.replace_all_uses_with(new_conv)
    g.graph.erase_node(user)
    g.graph.erase_node(conv)
    g.const.discard(user)
    g.const.discard(conv)
    return new_conv


def _reaches_output(node: fx.Node) -> bool:
    """The graph returns ``node`` or a view of it."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        for u in n.users:
            if u.op == "output":
                return True
            if u.target in _VIEWS and u not in seen:
                seen.add(u)
                stack.append(u)
    return False


def _only_views(node: fx.Node) -> bool:
    """``node`` is a chain of views of one placeholder (folding it saves nothing)."""
    while node.op != "placeholder":
        if node.target not in _VIEWS:
            return False
        node = node.args[0]
    return True


def _source_numel(node: fx.Node) -> int:
    """The largest placeholder ``node`` is computed from (its 'no blow-up' budget)."""
    stack, seen, best = [node], set(), 1
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            best = max(best, _val(n).numel())
        stack.extend(n.all_input_nodes)
    return best


def _keep_reason(node: fx.Node, const: set[fx.Node]) -> str | None:
    """Why the constant ``node`` must stay computed in the main graph, or None to fold it."""
    val = _val(node)
    if not isinstance(val, torch.Tensor):
        return "not a tensor"
    if not _is_static(val):
        return "symbolic size"
    if _only_views(node):
        return "a view of a parameter"
    if _reaches_output(node):
        return "returned by the graph"
    if val.numel() > _source_numel(node):
        return "larger than the parameters it reads"
    if not any(n.op == "placeholder" for n in _ancestors(node)):
        return "reads no parameter"
    return None


def _ancestors(node: fx.Node) -> list[fx.Node]:
    stack, seen = [node], {node}
    while stack:
        for i in stack.pop().all_input_nodes:
            if i not in seen:
                seen.add(i)
                stack.append(i)
    return list(seen)


def freeze(
    gm: fx.GraphModule, graph_args: Sequence[Any], frozen: Sequence[int]
) -> tuple[FoldedConstants | None, FreezeStats]:
    """Rewrite ``gm`` in place (affine epilogues into convolutions, constant subgraphs out) and
    return the constant graph's runtime, or None when nothing folds; ``frozen`` are the
    placeholder positions holding parameters the graph does not mutate."""
    frozen = {
        i
        for i in frozen
        if isinstance(graph_args[i], torch.Tensor) and not graph_args[i].is_inference()
    }
    if not frozen:
        return None, FreezeStats()
    g = _Graph(gm, frozen)
    epilogues = 0
    for conv in [n for n in g.graph.nodes if n.target is aten.convolution.default]:
        while conv is not None:
            conv = _fold_affine_epilogue(g, conv)
            epilogues += conv is not None
    g.graph.eliminate_dead_code()
    g.const &= set(g.graph.nodes)

    # boundaries: constant nodes a non-constant node (or the output) reads
    kept: list[str] = []
    while True:
        boundary = [
            n
            for n in g.graph.nodes
            if n in g.const and n.op == "call_function" and any(u not in g.const for u in n.users)
        ]
        rejected = [(n, r) for n in boundary if (r := _keep_reason(n, g.const)) is not None]
        if not rejected:
            break
        for n, reason in rejected:
            g.const.discard(n)
            kept.append(f"{n.name}: {reason}")
    if not boundary:
        gm.recompile()
        return None, FreezeStats(epilogues, 0, tuple(kept))

    const_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    needed = set().union(*(_ancestors(b) for b in boundary))
    sources = []
    for pos, p in enumerate(g.placeholders):
        if p in needed:
            env[p] = const_graph.placeholder(p.name)
            env[p].meta.update(p.meta)
            sources.append(pos)
    for n in g.graph.nodes:
        if n in needed and n.op == "call_function":
            env[n] = const_graph.node_copy(n, lambda a: env[a])
    const_graph.output(tuple(env[b] for b in boundary))
    const_gm = fx.GraphModule(torch.nn.Module(), const_graph)

    with torch.no_grad():
        values = list(const_gm(*[graph_args[i] for i in sources]))
    last = g.placeholders[-1]
    for k, (b, value) in enumerate(zip(boundary, values)):
        with g.graph.inserting_after(last):
            ph = g.graph.placeholder(f"folded_{k}")
        # the layout the main graph is compiled for is the real value's (fake strides can differ)
        ph.meta["val"] = g.fake_mode.from_tensor(value)
        b.replace_all_uses_with(ph)
        last = ph
    g.graph.eliminate_dead_code()
    g.graph.lint()
    gm.recompile()
    folded = FoldedConstants(const_gm, tuple(sources), tuple(_meta(v) for v in values))
    folded.prime(graph_args, values)
    return folded, FreezeStats(epilogues, len(boundary), tuple(kept))
