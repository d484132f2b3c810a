"""Split a joint forward+backward graph into a forward and a backward graph.

`min_cut_partition` is the paper's recomputation-aware partitioner: it chooses which values the
forward saves for the backward by a minimum s-t cut. Each node n becomes an edge n_in -> n_out whose
capacity is the bytes of n's value (the cost of saving it); data edges have infinite capacity.
The source feeds the primal inputs (and every op banned from recomputation that the forward
computes anyway); the backward-only nodes (those depending on a tangent) drain into the sink.
The cheapest cut is the set of values to save; every other forward value the backward needs is
recomputed in the backward from the saved ones. Cheap ops (pointwise, views) may be recomputed;
matmuls, convolutions, reductions and random ops may not.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch
from torch import fx

from ._compat import tensor_nbytes
from .checks import checks_its_inputs, keep_impure_or_checking
from .errors import AOTError
from .recompute_policy import banned_from_recompute

aten = torch.ops.aten

# Not pointwise-tagged, but as cheap to recompute as a pointwise op.
_CHEAP_OPS = frozenset(
    {
        aten.full.default,
        aten.scalar_tensor.default,
        aten.zeros.default,
        aten.ones.default,
        aten.arange.start_step,
        aten.arange.default,
        aten.clone.default,
        aten.alias.default,
        aten.expand.default,
        aten.view.default,
        aten._unsafe_view.default,
        aten.permute.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.unsqueeze.default,
        aten.t.default,
        aten.slice.Tensor,
        aten.select.int,
        aten.full_like.default,
        aten.zeros_like.default,
        aten.ones_like.default,
        aten.empty_like.default,
        aten.where.self,
        aten.copy.default,
        aten.sym_size.int,
        aten.sym_numel.default,
        aten.sym_stride.int,
    }
)


#: what saving a primal costs, per byte, next to an intermediate's 1.0 (see min_cut_partition)
_PRIMAL_COST = 0.01
#: what saving a size costs (min_cut_partition saves only the sizes no saved tensor gives:
#: a size argument of the graph, a size read off a mutated input)
_SIZE_COST = 8.0


def _is_size(node: fx.Node) -> bool:
    """Whether node's value is a size (a SymInt or int), which the forward can hand over."""
    return isinstance(node.meta.get("val"), (torch.SymInt, int)) and not isinstance(
        node.meta.get("val"), bool
    )


@dataclass(frozen=True)
class PartitionStats:
    """What a partition saved for the backward (stored as fw_gm.meta["partition"])."""

    saved: tuple[str, ...]
    saved_bytes: int
    recomputed: tuple[str, ...]
    #: bytes of the saved values that are not primals or views of one (what the forward adds to
    #: memory until the backward), a storage counted once however many views of it are saved;
    #: symbolic sizes read at their hints (the sizes of the call that compiled the graph)
    activation_bytes: int = 0
    #: ``activation_bytes`` as a formula (sympy's text) of the inputs' symbolic sizes, "" when
    #: every saved size is static; ``size_symbols`` says where each symbol is read: (symbol,
    #: primal index, dimension, or -1 for an int input holding the size itself)
    symbolic_activation_bytes: str = ""
    size_symbols: tuple[tuple[str, int, int], ...] = ()

    def activation_bytes_at(self, primals: Sequence[object]) -> int:
        """``activation_bytes`` for these graph inputs (the partitioned graph's primals): the
        symbolic sizes evaluated at their real values; the hint figure when a symbol is not read
        from an input (an unbacked size)."""
        if not self.symbolic_activation_bytes:
            return self.activation_bytes
        import sympy

        values = {}
        for name, index, dim in self.size_symbols:
            value = primals[index]
            size = value if dim < 0 else value.shape[dim]  # type: ignore[attr-defined]
            values[sympy.Symbol(name, integer=True, positive=True)] = int(size)  # type: ignore[arg-type]
        formula = sympy.sympify(self.symbolic_activation_bytes, locals={str(k): k for k in values})
        result = formula.subs(values)
        return int(result) if result.is_number else self.activation_bytes


def is_recomputable(node: fx.Node) -> bool:
    """True for ops cheap enough to recompute in the backward instead of saving their output."""
    if node.op != "call_function":
        return False
    target = node.target
    if target is operator.getitem:
        source = node.args[0]  # the multi-output node indexed (always a Node in an FX graph)
        return isinstance(source, fx.Node) and is_recomputable(source)
    if not isinstance(target, torch._ops.OpOverload):
        # arithmetic on sizes (``s0 * s1`` for a flatten's view): host-side, free to redo, and
        # saved only where nothing else gives it (``_SIZE_COST``). Not recomputable, a size product the
        # forward and the backward share (one node after CSE) was a source the cut could not
        # separate from the backward (training fuzz seed 9647: a written input's write-back)
        return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymBool, int, bool)) and (
            getattr(target, "__module__", None) in ("_operator", "operator")
            or target in (torch.sym_max, torch.sym_min, torch.sym_not)
        )
    tags = set(target.tags)
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if target in _CHEAP_OPS or torch.Tag.pointwise in tags:
        return True
    if target is aten._to_copy.default:
        # a dtype cast on one device is pointwise (autocast's casts of weights and activations);
        # a copy to another device is not cheap
        arg = node.args[0]
        src = arg.meta.get("val") if isinstance(arg, fx.Node) else None
        out = node.meta.get("val")
        return (
            isinstance(src, torch.Tensor)
            and isinstance(out, torch.Tensor)
            and src.device == out.device
        )
    return target.is_view


def _narrowing_cast_of(node: fx.Node, primals: set[fx.Node]) -> bool:
    """Whether ``node`` casts a primal (a weight) to a dtype no wider on the same device:
    autocast's bfloat16 copy of a parameter."""
    arg = node.args[0]
    if node.target is not aten._to_copy.default or not isinstance(arg, fx.Node):
        return False
    if arg not in primals:
        return False
    src, out = arg.meta.get("val"), node.meta.get("val")
    return (
        isinstance(src, torch.Tensor)
        and isinstance(out, torch.Tensor)
        and src.device == out.device
        and out.dtype.itemsize <= src.dtype.itemsize
    )


def _placeholders(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _output_args(gm: fx.GraphModule) -> list:
    return list(next(n for n in gm.graph.nodes if n.op == "output").args[0])


def _ancestors(roots, stop: set[fx.Node]) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [r for r in roots if isinstance(r, fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in stop:
            continue
        stack.extend(n.all_input_nodes)
    return seen


def _node_bytes(node: fx.Node) -> float:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return float(tensor_nbytes(val))
    # Sizes (SymInts) are recomputed from saved tensors (min_cut_partition saves one as an int
    # only where nothing else gives it); tuples cannot be saved as such (their getitems are).
    return math.inf


def _save_cost(node: fx.Node) -> float:
    """Bytes to save node; a view costs a hair more than its base so ties save the base tensor."""
    cost = _node_bytes(node)
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and target.is_view:
        cost *= 1.001
    return cost


def extract_graph(
    joint_gm: fx.GraphModule,
    inputs: list[fx.Node],
    outputs: list,
    checks: Sequence[fx.Node] = (),
    *,
    on_demand_after: set[fx.Node] | None = None,
) -> fx.GraphModule:
    """A new graph computing `outputs` from `inputs` (nodes of joint_gm), copying what is needed,
    plus the unused `checks` (nodes kept for the errors they raise, see checks.py).

    With ``on_demand_after`` (the nodes that depend on a tangent), a pure node outside it (a
    forward value the backward recomputes) is placed right before its first user, not where the
    joint graph has it (see ``_recompute_on_demand``)."""
    needed = _ancestors([*outputs, *checks], set(inputs))
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in inputs:
        ph = graph.placeholder(node.name)
        ph.meta.update(node.meta)
        env[node] = ph
    order = [n for n in joint_gm.graph.nodes if n not in env and n in needed and n.op != "output"]
    if on_demand_after is not None:
        order = _recompute_on_demand(order, on_demand_after)
    for node in order:
        if node.op == "placeholder":
            raise AOTError(
                f"the partition needs input {node.name} that is not available on this side"
            )
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[o] for o in outputs))
    graph.eliminate_dead_code(is_impure_node=keep_impure_or_checking)
    graph.lint()
    return fx.GraphModule(joint_gm, graph)


def _split(joint_gm, num_fwd_outputs: int, num_primals: int, saved: list[fx.Node]):
    placeholders = _placeholders(joint_gm)
    primals, tangents = placeholders[:num_primals], placeholders[num_primals:]
    outs = _output_args(joint_gm)
    fw_outs, bw_outs = outs[:num_fwd_outputs], outs[num_fwd_outputs:]
    # unused index ops of the forward still raise for a bad index in eager (and ops for dtypes
    # their kernels refuse): the forward runs them
    stop = set(primals)
    checks = [
        n
        for n in joint_gm.graph.nodes
        if not n.users and checks_its_inputs(n) and not _ancestors([n], stop) & set(tangents)
    ]
    fw_gm = extract_graph(joint_gm, primals, fw_outs + saved, checks)
    driven = _backward_nodes(joint_gm, len(primals))
    bw_gm = extract_graph(joint_gm, saved + tangents, bw_outs, on_demand_after=driven)
    return fw_gm, bw_gm


def _recompute_on_demand(order: list[fx.Node], driven: set[fx.Node]) -> list[fx.Node]:
    """``order`` with each pure node that no tangent reaches (not in ``driven``) moved to right
    before its first user.

    Those are the forward values the backward recomputes from the saved ones (a ReLU's output
    from the saved convolution output, for the convolution backward's input). In joint-graph
    order they all come first, so every one the backward must hold in memory (an extern kernel's
    input) was computed at the start and held until its use: the peak memory of a ResNet's step
    went past eager's, which saves those values instead. On demand, each lives from just before
    its first use, as the autograd engine would compute it. Nodes the tangents reach, and impure
    or checking nodes, keep their order.
    """
    members = set(order)
    deferred = {n for n in order if n not in driven and not keep_impure_or_checking(n)}
    placed: set[fx.Node] = set()
    out: list[fx.Node] = []

    def place(root: fx.Node) -> None:
        # iterative depth-first: a chain of recomputed nodes can be longer than Python's stack
        stack = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if node in placed:
                continue
            if ready:
                placed.add(node)
                out.append(node)
                continue
            stack.append((node, True))
            for arg in reversed(node.all_input_nodes):
                if arg in deferred and arg not in placed:
                    stack.append((arg, False))

    for node in order:
        if node not in deferred:
            place(node)
    for node in order:  # deferred values only the outputs read
        if node not in placed:
            place(node)
    assert len(out) == len(members)
    return out


def _backward_nodes(joint_gm: fx.GraphModule, num_primals: int) -> set[fx.Node]:
    """Nodes that depend on a tangent: they can only run in the backward."""
    tangents = set(_placeholders(joint_gm)[num_primals:])
    bw: set[fx.Node] = set()
    for node in joint_gm.graph.nodes:
        if node.op != "output" and (node in tangents or any(a in bw for a in node.all_input_nodes)):
            bw.add(node)
    return bw


def default_partition(
    joint_gm: fx.GraphModule, *, num_fwd_outputs: int, num_primals: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Save every forward value the backward reads (no recomputation); a baseline for min-cut."""
    bw_nodes = _backward_nodes(joint_gm, num_primals)
    bw_outs = _output_args(joint_gm)[num_fwd_outputs:]
    bw_needed = _ancestors(bw_outs, set())
    saved = []
    for node in joint_gm.graph.nodes:
        if node in bw_nodes or node not in bw_needed or node.op == "output":
            continue
        # a gradient that reads no tangent is computed in the forward and saved
        if (any(u in bw_nodes for u in node.users) or node in bw_outs) and isinstance(
            node.meta.get("val"), torch.Tensor
        ):
            saved.append(node)
    return _finish(joint_gm, num_fwd_outputs, num_primals, saved)


def min_cut_partition(
    joint_gm: fx.GraphModule, *, num_fwd_outputs: int, num_primals: int
) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Partition a joint graph by min-cut with recomputation.

    joint_gm: placeholders [primals (num_primals)..., tangents...]; outputs [forward outputs
    (num_fwd_outputs)..., input grads...]. Returns (fw_gm, bw_gm): fw_gm(*primals) ->
    (*forward outputs, *saved), bw_gm(*saved, *tangents) -> (*input grads). fw_gm.meta["partition"]
    holds a PartitionStats; fw_gm.meta["num_saved"] the number of saved values.
    """
    _narrow_random_masks(joint_gm)
    placeholders = _placeholders(joint_gm)
    primals = set(placeholders[:num_primals])
    mutated = {placeholders[i] for i in joint_gm.meta.get("mutated_inputs", ())}
    outs = _output_args(joint_gm)
    bw_nodes = _backward_nodes(joint_gm, num_primals)
    fw_required = _ancestors(outs[:num_fwd_outputs], set()) - bw_nodes
    bw_required = _ancestors(outs[num_fwd_outputs:], set())
    banned = banned_from_recompute(
        joint_gm,
        bw_nodes,
        fw_required,
        lambda n: not is_recomputable(n) or _narrowing_cast_of(n, primals),
    )

    # what the forward derives from an input it mutates (whose old value the backward cannot read)
    from_mutated: set[fx.Node] = set()
    for node in joint_gm.graph.nodes:
        if node in mutated or any(a in from_mutated for a in node.all_input_nodes):
            from_mutated.add(node)

    g = nx.DiGraph()
    for node in joint_gm.graph.nodes:
        if node.op == "output" or node not in bw_required:
            continue
        if node in bw_nodes:
            # A tangent-dependent node must be computed in the backward: everything it reads
            # from the forward side has to cross the cut.
            g.add_edge(node.name + "_in", "sink", capacity=math.inf)
            continue
        if node in primals:
            g.add_edge("source", node.name + "_in", capacity=math.inf)
        elif (
            node in fw_required
            and node.op != "placeholder"
            and (not is_recomputable(node) or _narrowing_cast_of(node, primals) or node in banned)
        ):
            # A banned op the forward computes anyway is never recomputed: it is free to reach.
            # So is autocast's cast of a weight: saved, as eager's autocast cache keeps it, not
            # cast again in the backward (a kernel launch per weight, each step, for bytes that
            # eager holds too). So are the cheap values recompute_policy.py bans (read by a
            # backward matmul, or at the end of a long recompute chain).
            g.add_edge("source", node.name + "_in", capacity=math.inf)
        cost = _save_cost(node)
        if math.isinf(cost) and (node in primals or node in from_mutated) and _is_size(node):
            # a size argument of the graph (Longformer's num_heads, once automatic dynamic made
            # it a symbol, read by the backward of a view as [2, num_heads, 16, 9]), or a size
            # read off a mutated input (whose old value cannot cross the cut): saved as it is,
            # an int. Other sizes are recomputed from saved tensors. There was no finite cut
            cost = _SIZE_COST
        elif node in primals:
            # A parameter or input is alive anyway: saving it only keeps a reference. Priced at
            # 1% of its bytes (a tie-breaker).
            cost *= _PRIMAL_COST
            if node in mutated:
                # its old value is gone once the forward wrote the new one back: the cut saves
                # what the backward derives from it instead (no finite cut: eager's own
                # "modified by an inplace operation" case, left to eager)
                cost = math.inf
        elif node not in fw_required:
            # On a tie, do backward-only work in the backward: the forward stays as short as eager's.
            cost *= 1.01
        # A value of no element costs a hair, not nothing: networkx's cut is the one nearest the
        # sink, so a free edge no flow crosses was cut, and a zero fill the backward makes (an
        # index_put's base) was saved, where the backward recomputes it. As a saved value, the
        # specialisation on absent tangents could not see it was zero: an empty gradient where
        # eager's is None (training fuzz seed 9245)
        cost = max(cost, 1e-3)
        g.add_edge(node.name + "_in", node.name + "_out", capacity=cost)
        for user in node.users:
            if user in bw_required:
                g.add_edge(node.name + "_out", user.name + "_in", capacity=math.inf)
    for grad in outs[num_fwd_outputs:]:
        if isinstance(grad, fx.Node) and grad not in bw_nodes:
            # a gradient that reads no tangent (one of zero elements: its backward ops are
            # constants and masks of the input) is still the backward's output: it is saved or
            # recomputed from what is saved, as any value the backward reads
            g.add_edge(grad.name + "_out", "sink", capacity=math.inf)
    if "source" not in g or "sink" not in g:
        return _finish(joint_gm, num_fwd_outputs, num_primals, [])
    try:
        _, (reachable, non_reachable) = nx.minimum_cut(g, "source", "sink")
    except nx.NetworkXUnbounded as exc:
        raise AOTError(
            "no finite cut separates forward from backward: a value the backward needs "
            "has no savable tensor form"
        ) from exc
    by_name = {n.name: n for n in joint_gm.graph.nodes}
    saved = []
    for u in reachable:
        if not u.endswith("_in") or u[:-3] + "_out" not in non_reachable:
            continue
        saved.append(by_name[u[:-3]])
    order = {n: i for i, n in enumerate(joint_gm.graph.nodes)}
    saved.sort(key=order.__getitem__)
    return _finish(joint_gm, num_fwd_outputs, num_primals, saved)


def _finish(joint_gm, num_fwd_outputs, num_primals, saved):
    placeholders = _placeholders(joint_gm)
    for i in joint_gm.meta.get("mutated_inputs", ()):
        if placeholders[i] in saved:
            raise AOTError(
                f"the backward reads graph input {i}, which the forward mutates: its old "
                "value is gone once the new one is written back"
            )
    fw_gm, bw_gm = _split(joint_gm, num_fwd_outputs, num_primals, saved)
    fw_names = {n.name for n in fw_gm.graph.nodes if n.op == "call_function"}
    recomputed = tuple(
        n.name for n in bw_gm.graph.nodes if n.op == "call_function" and n.name in fw_names
    )
    primals = _placeholders(joint_gm)[:num_primals]
    roots = _activation_roots(saved, set(primals))
    formula = sum((_symbolic_bytes(n) for n in roots), start=0)
    symbolic = not isinstance(formula, int) and not formula.is_number
    stats = PartitionStats(
        tuple(n.name for n in saved),
        int(sum(_SIZE_COST if _is_size(n) else _node_bytes(n) for n in saved)),
        recomputed,
        int(sum(b for b in roots.values() if math.isfinite(b))),
        str(formula) if symbolic else "",
        _size_symbols(primals) if symbolic else (),
    )
    fw_gm.meta["partition"] = stats
    fw_gm.meta["num_saved"] = len(saved)
    bw_gm.meta["partition"] = stats
    return fw_gm, bw_gm


def _activation_roots(saved: list[fx.Node], primals: set[fx.Node]) -> dict[fx.Node, float]:
    """The storages the saved values hold beyond the primals', with their bytes: a view counts as
    its base (once), a primal or a view of one as nothing (it is alive anyway)."""
    roots: dict[fx.Node, float] = {}
    for node in saved:
        root = node
        while (
            root.op == "call_function"
            and isinstance(root.target, torch._ops.OpOverload)
            and root.target.is_view
            and isinstance(root.args[0], fx.Node)
        ):
            root = root.args[0]
        if root in primals:
            continue
        roots[root] = max(
            roots.get(root, 0.0), _node_bytes(root) if root is not node else _node_bytes(node)
        )
    return roots


def _symbolic_bytes(node: fx.Node):
    """A saved storage's bytes: an int, or a sympy expression of the symbolic sizes."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    numel = val.numel()
    if isinstance(numel, int):
        return numel * val.element_size()
    return numel.node.expr * val.element_size()


def _size_symbols(primals: list[fx.Node]) -> tuple[tuple[str, int, int], ...]:
    """Where each size symbol of the primals is read: (symbol, primal index, dimension or -1)."""
    found: dict[str, tuple[str, int, int]] = {}
    for index, node in enumerate(primals):
        val = node.meta.get("val")
        sizes: list[tuple[int, Any]] = [(-1, val)] if isinstance(val, torch.SymInt) else []
        if isinstance(val, torch.Tensor):
            sizes = list(enumerate(val.shape))
        for dim, size in sizes:
            expr = getattr(getattr(size, "node", None), "expr", None)
            if expr is not None and expr.is_Symbol and str(expr) not in found:
                found[str(expr)] = (str(expr), index, dim)
    return tuple(found.values())


def _narrow_random_masks(joint_gm: fx.GraphModule) -> None:
    """A bernoulli draw (dropout's mask) is 0 or 1 in a float dtype; read it through a bool
    (``ne(draw, 0)`` then a cast back, both recomputable), so the cut can save 1 byte an element
    instead of 4 (or 2), as eager's dropout saves a bool mask. Exact: the cast gives back the
    same 0.0 and 1.0. The draw itself is never recomputed (random), so without this the forward
    had to save the float draw or what it scales."""
    graph = joint_gm.graph
    narrowed = False
    for node in list(graph.nodes):
        target = node.target
        if (
            node.op != "call_function"
            or getattr(target, "overloadpacket", None) is not aten.bernoulli
        ):
            continue
        val = node.meta.get("val")
        mode = getattr(val, "fake_mode", None)
        if not isinstance(val, torch.Tensor) or mode is None or not val.dtype.is_floating_point:
            continue
        with graph.inserting_after(node):
            mask = graph.call_function(aten.ne.Scalar, (node, 0))
        with graph.inserting_after(mask):
            draw = graph.call_function(aten._to_copy.default, (mask,), {"dtype": val.dtype})
        with mode:
            mask.meta["val"] = aten.ne.Scalar(val, 0)
            draw.meta["val"] = aten._to_copy.default(mask.meta["val"], dtype=val.dtype)
        node.replace_all_uses_with(draw, delete_user_cb=lambda user, mask=mask: user is not mask)
        narrowed = True
    if narrowed:  # writing a training graph's Python code again takes a tenth of a second
        joint_gm.recompile()
