"""Control-flow operators as higher-order ops: ``torch.cond``, ``while_loop`` and ``map``.

TorchDynamo keeps these in one graph: each function argument (a branch, a loop condition or
body, a mapped function) is traced with the same machinery into its own FX graph, held by the
parent graph as a GraphModule attribute, and the call becomes one node of the higher-order
operator (``torch.ops.higher_order.cond(pred, true_graph, false_graph, operands)``). The
predicate stays a graph value: a tensor decides at run time, with no graph break and no guard.

A subgraph is traced by pointing the OutputGraph at a fresh graph while the function is
inlined. Tensors the function reads from outside (closures, globals, parameters, the parent's
intermediate values) show up as nodes of another graph; they are *lifted*: each becomes a
placeholder of the subgraph and an extra operand of the call, the same for every function of
one operator (both branches of a cond take the same operands).

A function that cannot be traced, or that mutates outside state (the operators forbid it), makes
the whole call run in Python (a graph break with the reason), never a half-traced graph.
"""

from __future__ import annotations

import contextlib
import operator
import sys

import torch
import torch._higher_order_ops  # loads the cond, while_loop and map modules
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch.multiprocessing.reductions import StorageWeakRef

from ..exc import Unsupported
from .base import VariableTracker
from .containers import ListVariable, TupleVariable
from .symbolic import SymNodeVariable
from .tensors import TensorVariable


def _operators() -> dict:
    """The Python entry points and the operators themselves, by kind."""
    found: dict = {}
    modules = {
        "cond": "torch._higher_order_ops.cond",
        "while_loop": "torch._higher_order_ops.while_loop",
        "map": "torch._higher_order_ops.map",
    }
    for kind, modname in modules.items():
        mod = sys.modules.get(modname)
        fn = getattr(mod, kind, None) if mod is not None else None
        if fn is not None:
            found[fn] = kind
    higher = torch.ops.higher_order
    for kind, opname in (("cond", "cond"), ("while_loop", "while_loop"), ("map_impl", "map_impl")):
        try:
            found[getattr(higher, opname)] = kind
        except (AttributeError, RuntimeError):  # an older torch without that operator
            pass
    return found


_OPERATORS = _operators()


def higher_order_kind(fn) -> str | None:
    """``"cond"``, ``"while_loop"``, ``"map"`` or ``"map_impl"`` for a control-flow operator."""
    try:
        return _OPERATORS.get(fn)
    except TypeError:  # unhashable
        return None


def call_higher_order(tx, kind: str, args: list, kwargs: dict) -> VariableTracker:
    if kind == "cond":
        return _cond(tx, *_bind(kind, args, kwargs, ("pred", "true_fn", "false_fn", "operands"), 1))
    if kind == "while_loop":
        bound = _bind(
            kind, args, kwargs, ("cond_fn", "body_fn", "carried_inputs", "additional_inputs"), 0
        )
        return _while_loop(tx, *bound)
    if kind == "map":
        if len(args) < 2 or kwargs:
            raise Unsupported("map(f, xs, *args) with keyword arguments")
        return _map(
            tx,
            args[0],
            tx.unpack(args[1]) if _is_seq(args[1]) else [args[1]],
            list(args[2:]),
            single=not _is_seq(args[1]),
        )
    # map_impl(f, xs, args): the operator itself, f takes the flat slices then the flat args
    f, xs, rest = _bind(kind, args, kwargs, ("f", "xs", "pos_args"), 0)
    return _map(tx, f, tx.unpack(xs), tx.unpack(rest), single=False, flat=True)


def _bind(kind, args, kwargs, names, defaults_from_end) -> list:
    values = list(args) + [None] * (len(names) - len(args))
    for k, v in kwargs.items():
        if k not in names:
            raise Unsupported(f"{kind}() got an unexpected keyword argument {k!r}")
        values[names.index(k)] = v
    required = len(names) - defaults_from_end if kind != "while_loop" else 3
    if any(v is None for v in values[:required]):
        raise Unsupported(f"{kind}() missing arguments (takes {', '.join(names)})")
    return values


def _is_seq(v) -> bool:
    return isinstance(v, (TupleVariable, ListVariable))


def _operands(tx, v, what: str) -> list:
    items = [] if v is None else tx.unpack(v)
    for i in items:
        if not isinstance(i, (TensorVariable, SymNodeVariable)) and not (
            i.is_python_constant() and isinstance(i.as_python_constant(), (int, float, bool))
        ):
            raise Unsupported(
                f"{what} holds a {type(i).__name__}; only tensors and numbers are supported"
            )
    return items


# ----------------------------------------------------------------------------- the operators


def _cond(tx, pred, true_fn, false_fn, operands):
    ops = _operands(tx, operands, "torch.cond operands")
    if not all(isinstance(o, TensorVariable) for o in ops):
        raise Unsupported(
            "torch.cond operands that are not tensors (eager raises RuntimeError)",
            "it runs in Python, which raises eager's error",
        )
    if not isinstance(pred, TensorVariable):
        # a Python bool (or a size, decided now with a guard): the branch is known at capture
        chosen = true_fn if tx.truth(pred) else false_fn
        return tx.call_function(chosen, list(ops), {})
    if pred.fake.numel() != 1:
        raise Unsupported("torch.cond with a predicate of more than one element (eager raises)")
    branches = [
        _trace(tx, fn, ops, name) for fn, name in ((true_fn, "cond_true"), (false_fn, "cond_false"))
    ]
    lifted = _unify_lifted(branches)
    specs = [b.spec for b in branches]
    if specs[0] != specs[1]:
        raise Unsupported(
            f"torch.cond branches return different structures ({specs[0]} vs {specs[1]})"
        )
    if tx.out.shape_env is None and _sizes_differ(branches):
        e = Unsupported(
            "torch.cond branches return tensors of different sizes: the result's size is "
            "known only at run time, which needs a ShapeEnv"
        )
        e.needs_shape_env = True  # capture_frame captures again with one
        raise e
    gms = [_attach(tx, b, name) for b, name in zip(branches, ("cond_true", "cond_false"))]
    args = (pred.node, *gms, tuple(_node(o) for o in ops) + tuple(lifted))
    fakes = (
        pred.fake,
        *(b.gm for b in branches),
        tuple(_fake(o) for o in ops) + tuple(_meta(n) for n in lifted),
    )
    flat = _emit(tx, torch.ops.higher_order.cond, args, fakes)
    return _rebuild(branches[0].spec, flat)


def _sizes_differ(branches) -> bool:
    """Whether the branches' outputs differ in size or strides (cond then gives unbacked sizes)."""
    metas = [[_meta(n) for n in b.outputs] for b in branches]
    return any(a.shape != b.shape or a.stride() != b.stride() for a, b in zip(*metas))


def _while_loop(tx, cond_fn, body_fn, carried, additional):
    carried_vars = _operands(tx, carried, "while_loop carried_inputs")
    extra = _operands(tx, additional, "while_loop additional_inputs")
    if not all(isinstance(c, TensorVariable) for c in carried_vars):
        raise Unsupported(
            "while_loop carrying a Python number (it would become an unbacked value)",
            "carry it as a 0-d tensor",
        )
    ops = carried_vars + extra
    cond_g = _trace(tx, cond_fn, ops, "while_cond", single_output=True)
    body_g = _trace(tx, body_fn, ops, "while_body")
    if len(cond_g.outputs) != 1 or cond_g.spec != "leaf":
        raise Unsupported("while_loop cond_fn must return one boolean tensor")
    if len(body_g.outputs) != len(carried_vars):
        raise Unsupported(
            f"while_loop body_fn returns {len(body_g.outputs)} values for "
            f"{len(carried_vars)} carried inputs"
        )
    lifted = _unify_lifted([cond_g, body_g])
    gms = [_attach(tx, g, n) for g, n in ((cond_g, "while_cond"), (body_g, "while_body"))]
    args = (
        *gms,
        tuple(_node(c) for c in carried_vars),
        tuple(_node(e) for e in extra) + tuple(lifted),
    )
    fakes = (
        cond_g.gm,
        body_g.gm,
        tuple(_fake(c) for c in carried_vars),
        tuple(_fake(e) for e in extra) + tuple(_meta(n) for n in lifted),
    )
    for c, o in zip(carried_vars, body_g.outputs):
        v = _meta(o)
        if not isinstance(v, torch.Tensor) or v.shape != c.fake.shape or v.dtype != c.fake.dtype:
            raise Unsupported(
                "while_loop body_fn returns values of another shape or dtype than carried "
                "(eager raises)"
            )
    # the results are like the carried inputs (checked above): no fake run, which would need a
    # ShapeEnv for the values a loop may create even when every size is static
    results = tuple(_fresh_fake(tx.out, c.fake) for c in carried_vars)
    flat = _emit(tx, torch.ops.higher_order.while_loop, args, fakes, results)
    return TupleVariable(flat)  # while_loop returns the final carried values as a tuple


def _map(tx, f, xs, rest, *, single: bool, flat: bool = False):
    if not xs or not all(isinstance(x, TensorVariable) for x in xs):
        raise Unsupported("map over something other than tensors")
    if any(x.fake.dim() == 0 for x in xs):
        raise Unsupported("map over a 0-d tensor")
    lead = {
        int(x.fake.shape[0]) if not isinstance(x.fake.shape[0], torch.SymInt) else x.fake.shape[0]
        for x in xs
    }
    if len(lead) != 1:
        raise Unsupported("map over tensors with different leading sizes (eager raises)")
    rest = _operands(tx, TupleVariable(rest), "map arguments")
    slices = [_slice_like(tx, x) for x in xs]
    body = _trace(
        tx,
        f,
        slices + rest,
        "map_body",
        call_as=None if flat else (lambda sl, r: [sl[0] if single else TupleVariable(sl), *r]),
        split=len(slices),
    )
    lifted = _unify_lifted([body])
    gm = _attach(tx, body, "map_body")
    args = (gm, [x.node for x in xs], [_node(r) for r in rest] + list(lifted))
    fakes = (body.gm, [x.fake for x in xs], [_fake(r) for r in rest] + [_meta(n) for n in lifted])
    out = _emit(tx, torch.ops.higher_order.map_impl, args, fakes)
    return _rebuild(body.spec, out)


# ----------------------------------------------------------------------------- subgraphs


class _Subgraph:
    def __init__(self, graph, outputs, spec, external):
        self.graph = graph
        self.outputs = outputs  # the output nodes (in ``graph``)
        self.spec = spec
        self.external = external  # nodes of enclosing graphs the function read, in first-use order
        self.lifted: list = []
        self.gm = None


def _trace(
    tx,
    fn: VariableTracker,
    operands: list,
    name: str,
    call_as=None,
    split=None,
    single_output=False,
) -> _Subgraph:
    """Inline ``fn`` over placeholders shaped like ``operands`` into a graph of its own."""
    out = tx.out
    parent = out.graph
    sub = torch.fx.Graph()
    params = []
    for i, op in enumerate(operands):
        if isinstance(op, TensorVariable):
            ph = sub.placeholder(f"arg{i}")
            fake = _fresh_fake(out, op.fake)
            ph.meta["example_value"] = fake
            var = TensorVariable(ph, fake)
            out.fake_to_var[id(fake)] = var
            out.keepalive.append(fake)
            params.append(var)
        elif isinstance(op, SymNodeVariable):
            ph = sub.placeholder(f"arg{i}")
            ph.meta["example_value"] = op.value
            params.append(SymNodeVariable(ph, op.value))
        else:
            ph = sub.placeholder(f"arg{i}")
            ph.meta["example_value"] = op.as_python_constant()
            params.append(op)
    call_args = params if call_as is None else call_as(params[:split], params[split:])
    effects = len(out.side_effects.entries)
    out.graph = sub
    try:
        result = tx.call_function(fn, call_args, {})
    except Unsupported as e:
        raise Unsupported(
            f"{name.replace('_', ' ')} function: {e.construct}",
            "the control-flow operator runs in Python between two graphs",
        ) from e
    finally:
        out.graph = parent
    if len(out.side_effects.entries) != effects:
        raise Unsupported(
            f"{name.replace('_', ' ')} function mutates outside state (the operator forbids it)",
            "the control-flow operator runs in Python between two graphs",
        )
    leaves, spec = _flatten(result, name)
    outputs = _unaliased_outputs(out, sub, leaves)
    sub.output(outputs[0] if single_output and spec == "leaf" else tuple(outputs))
    external: list = []
    for node in sub.nodes:
        for inp in node.all_input_nodes:
            if inp.graph is not sub and inp not in external:
                external.append(inp)
    return _Subgraph(sub, outputs, spec, external)


def _unaliased_outputs(out, sub, leaves) -> list:
    """The subgraph's output nodes, each a tensor of its own: an output that is an input, a view
    of one, a tensor from outside, or another output again is cloned (the operators refuse
    outputs aliasing inputs or each other: "might be aliasing the input or the output")."""

    def storage(t):
        return StorageWeakRef(t.untyped_storage())

    taken = {
        storage(ph.meta["example_value"])
        for ph in sub.nodes
        if ph.op == "placeholder" and isinstance(ph.meta.get("example_value"), torch.Tensor)
    }
    outputs = []
    for v in leaves:
        node, fake = v.node, v.fake
        if node.graph is not sub or storage(fake) in taken:
            with (
                out.fake_mode,
                (
                    enable_python_dispatcher()
                    if out.shape_env is not None
                    else contextlib.nullcontext()
                ),
            ):
                fake = fake.clone()
            node = sub.call_function(torch.clone, (node,))
            node.meta["example_value"] = fake
        taken.add(storage(fake))
        outputs.append(node)
    return outputs


def _unify_lifted(subgraphs: list) -> list:
    """Lift the union of what the functions read from outside: the same extra placeholders, in
    the same order, in every subgraph."""
    lifted: list = []
    for s in subgraphs:
        for n in s.external:
            if n not in lifted:
                lifted.append(n)
    for s in subgraphs:
        _lift(s, lifted)
    return lifted


def _lift(s: _Subgraph, lifted: list) -> None:
    g = s.graph
    last = [n for n in g.nodes if n.op == "placeholder"][-1:] or None
    where = g.inserting_after(last[0]) if last else g.inserting_before(next(iter(g.nodes)))
    new = {}
    with where:
        for n in reversed(lifted):  # inserting_after the same node: reverse order
            ph = g.placeholder(f"lifted_{n.name}")
            ph.meta["example_value"] = _meta(n)
            new[n] = ph
    for node in list(g.nodes):
        for inp in list(node.all_input_nodes):
            if inp in new:
                node.replace_input_with(inp, new[inp])
    s.lifted = lifted


def _attach(tx, s: _Subgraph, name: str):
    """The subgraph as a GraphModule attribute of the root, and its get_attr node."""
    out = tx.out
    s.graph.lint()
    s.gm = torch.fx.GraphModule(out.root, s.graph)
    attr = out._fresh(f"{name}_graph")
    out.root.add_module(attr, s.gm)
    node = out.graph.get_attr(attr)
    node.meta["example_value"] = s.gm  # contract C1: every node says what it holds
    return node


def _emit(tx, op, args, fakes, result=None) -> list:
    """The operator's node in the current graph, its metadata from running it on fakes."""
    out = tx.out
    try:
        if result is None:
            with (
                out.fake_mode,
                (
                    enable_python_dispatcher()
                    if out.shape_env is not None
                    else contextlib.nullcontext()
                ),
            ):
                result = op(*fakes)
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise Unsupported(
            f"{op} on fake tensors raised {type(e).__name__}: {first}",
            "the control-flow operator runs in Python between two graphs",
        ) from e
    node = out.graph.create_node("call_function", op, args, {})
    node.meta["example_value"] = result
    out.bind_unbacked(node, result)  # a cond whose branches differ in size: unbacked sizes
    items = []
    for i, r in enumerate(result):
        sub = out.graph.call_function(operator.getitem, (node, i))
        sub.meta["example_value"] = r
        items.append(out._wrap_result(sub, r))
    return items


def _flatten(v, name):
    if isinstance(v, TensorVariable):
        return [v], "leaf"
    if isinstance(v, (TupleVariable, ListVariable)):
        leaves, specs = [], []
        for i in v.items:
            lv, sp = _flatten(i, name)
            leaves += lv
            specs.append(sp)
        return leaves, (type(v), getattr(v, "cls", None), tuple(specs))
    raise Unsupported(
        f"{name.replace('_', ' ')} function returns a {type(v).__name__}; "
        "control-flow operators return tensors (and tuples or lists of them)"
    )


def _rebuild(spec, flat: list):
    it = iter(flat)

    def build(sp):
        if sp == "leaf":
            return next(it)
        kind, cls, children = sp
        items = [build(c) for c in children]
        if kind is ListVariable:
            return ListVariable(items)
        return TupleVariable(items, cls=cls or tuple)

    return build(spec)


def _slice_like(tx, x: TensorVariable) -> VariableTracker:
    """A stand-in for ``x[0]`` (its metadata only; the body's placeholder is fresh)."""
    with tx.out.fake_mode:
        fake = x.fake.select(0, 0)
    return TensorVariable(x.node, fake)


def _fresh_fake(out, like: torch.Tensor) -> torch.Tensor:
    with (
        out.fake_mode,
        enable_python_dispatcher() if out.shape_env is not None else contextlib.nullcontext(),
    ):
        fake = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device=like.device)
    if like.requires_grad:
        fake.requires_grad_(True)
    return fake


def _node(v):
    if isinstance(v, (TensorVariable, SymNodeVariable)):
        return v.node
    return v.as_python_constant()


def _fake(v):
    if isinstance(v, TensorVariable):
        return v.fake
    if isinstance(v, SymNodeVariable):
        return v.value
    return v.as_python_constant()


def _meta(node):
    return node.meta.get("example_value")


__all__ = ["call_higher_order", "higher_order_kind"]
