"""Torch-level FX graph -> ATen-level functional graph (make_fx + functionalize + decompositions).

The graph we produce satisfies contract C2: placeholders are [lifted parameters/buffers, then the
graph's own inputs], every node carries meta["val"], call_function targets are OpOverloads or
operator.getitem, there are no mutating ops, and the output is a flat tuple of tensors. Input
mutations (x.add_(1), batch norm's running stats) do not stay in the graph as copy_ nodes: they
become extra outputs holding the inputs' new values, which the runtime copies back.
"""

from __future__ import annotations

import contextlib
import operator
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from ._batch_norm import BatchNormAsLegit
from ._compat import as_decomposition_dict, default_decompositions, has_metadata_mutation, is_fake
from ._linear import SymbolicLinear
from ._masked_attention import MaskedAttention
from .checks import keep_impure_or_checking
from .cse import eliminate_common_subexpressions
from .errors import AOTError

aten = torch.ops.aten

#: make_fx runs one trace at a time in the process: torch.fx's tracer keeps its patcher in a
#: module global (torch/fx/_symbolic_trace.py CURRENT_PATCHER), and two traces on two threads
#: failed with "CURRENT_PATCHER is None". Re-entrant: a trace may start another.
MAKE_FX_LOCK = threading.RLock()


@dataclass(frozen=True)
class LiftedGraph:
    """A torch-level graph whose get_attr tensors became leading placeholders.

    `gm` is called as gm(*params, *inputs); `params` are the very tensors (nn.Parameter / buffers)
    the original graph module holds, and `param_names` their attribute paths.
    """

    gm: fx.GraphModule
    params: tuple[torch.Tensor, ...]
    param_names: tuple[str, ...]
    # Non-tensor graph outputs (None, Python numbers) as (position, value); gm does not return them.
    constant_outputs: tuple[tuple[int, Any], ...] = ()


@dataclass(frozen=True)
class FunctionalGraph:
    """An ATen graph plus what the runtime needs to undo functionalization.

    Outputs of `gm` are [user outputs..., new values of mutated inputs...];
    `mutated_inputs[k]` is the placeholder index that output num_user_outputs + k is copied into.
    """

    gm: fx.GraphModule
    num_user_outputs: int
    mutated_inputs: tuple[int, ...]


def _fetch_attr(root: torch.nn.Module, target: str) -> Any:
    obj: Any = root
    for atom in target.split("."):
        if not hasattr(obj, atom):
            raise AOTError(
                f"get_attr target {target!r} does not exist on the graph module; "
                "the graph and its module are out of sync"
            )
        obj = getattr(obj, atom)
    return obj


def lift_parameters(gm: fx.GraphModule) -> LiftedGraph:
    """Turn every get_attr node that holds a tensor into a leading placeholder (in first-use order)."""
    new_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    names: list[str] = []
    params: list[torch.Tensor] = []
    by_target: dict[str, fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = _fetch_attr(gm, node.target)
            if isinstance(value, torch.Tensor) and node.target not in by_target:
                ph = new_graph.placeholder("p_" + node.target.replace(".", "_"))
                ph.meta.update(node.meta)
                by_target[node.target] = ph
                names.append(node.target)
                params.append(value)
    constants: list[tuple[int, Any]] = []
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target in by_target:
            env[node] = by_target[node.target]
        elif node.op == "output":
            outs = _as_output_tuple(node.args[0])
            constants = [(i, o) for i, o in enumerate(outs) if not isinstance(o, fx.Node)]
            tensors = tuple(env[o] for o in outs if isinstance(o, fx.Node))
            new_graph.output(tensors)
        else:
            env[node] = new_graph.node_copy(node, lambda n: env[n])
    lifted = fx.GraphModule(gm, new_graph)
    return LiftedGraph(lifted, tuple(params), tuple(names), tuple(constants))


def merge_constant_outputs(outs: Sequence[Any], constants: Sequence[tuple[int, Any]]) -> list:
    """Put the non-tensor outputs `lift_parameters` set aside back in their positions."""
    result = list(outs)
    for i, value in constants:
        result.insert(i, value)
    return result


# A decomposition table: {OpOverload: function}, or a zero-argument callable returning one.
Decompositions = Mapping[Any, Callable[..., Any]] | Callable[[], Mapping[Any, Callable[..., Any]]]


# Fused attention forwards whose decomposition computes the output but not the auxiliary results
# (logsumexp, RNG state) in the layout their backward kernel reads: autograd pairs the forward with
# that kernel, so decomposing the forward gives wrong gradients (torch's core-ATen table decomposes
# `_scaled_dot_product_flash_attention_for_cpu`: gradients were off by ~50).
_FUSED_ATTENTION_FORWARDS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)


def paired_for_autograd(decompositions: dict) -> dict:
    """The table for a joint forward+backward trace: fused attention forwards stay whole, beside
    the backward kernel that reads their auxiliary outputs."""
    aten = torch.ops.aten
    kept = set()
    for name in _FUSED_ATTENTION_FORWARDS:
        packet = getattr(aten, name, None)
        if packet is not None:
            kept |= {getattr(packet, o) for o in packet.overloads()}
    if not kept & decompositions.keys():
        return decompositions
    return {op: fn for op, fn in decompositions.items() if op not in kept}


def resolve_decompositions(decompositions: Decompositions | None) -> dict:
    """The caller's table as a dict; None means torch's core-ATen decompositions."""
    if decompositions is None:
        return default_decompositions()
    return as_decomposition_dict(decompositions)


def _as_output_tuple(out) -> tuple:
    if isinstance(out, (tuple, list)):
        return tuple(out)
    return (out,)


def trace_functional(
    fn: Callable[..., Sequence[Any]],
    args: Sequence[Any],
    decompositions: dict,
    *,
    fake: bool = True,
) -> FunctionalGraph:
    """Trace fn(*args) to a functional ATen graph whose input mutations are extra outputs.

    `fake=True` traces real example tensors under a fresh FakeTensorMode (static shapes);
    `fake=False` expects `args` to already be fake tensors of one FakeTensorMode (symbolic shapes).
    """

    def flat_fn(*a):
        with BatchNormAsLegit(), SymbolicLinear(), MaskedAttention():
            outs = _as_output_tuple(fn(*a))
        _refuse_metadata_mutations(a)
        return outs

    functional = torch.func.functionalize(flat_fn, remove="mutations")
    try:
        # symbolic inputs: composite ops take their Python decompositions, which keep sizes
        # symbolic (older torch's C++ ones call numel() on them and fail)
        python_dispatcher = enable_python_dispatcher() if not fake else contextlib.nullcontext()
        with MAKE_FX_LOCK, _ambient_fake_mode(args, fake), python_dispatcher:
            traced = make_fx(
                functional,
                decomposition_table=decompositions,
                tracing_mode="fake" if fake else "real",
                _allow_non_fake_inputs=False,
            )(*args)
            if _writes_in_place(traced):
                # decompositions run below functionalization: the in-place ops one writes (the
                # core table's GRU and RNN cells: add_, mul_, sigmoid_, tanh_) reach the graph as
                # they are, each an ATen call loop-ir cannot fuse. One more functionalizing trace
                # of the graph itself rewrites them
                traced = make_fx(
                    torch.func.functionalize(traced, remove="mutations"),
                    tracing_mode="fake" if fake else "real",
                    _allow_non_fake_inputs=False,
                )(*args)
    except AOTError:
        raise
    except Exception as exc:
        raise AOTError(
            f"make_fx could not trace the graph to ATen: {type(exc).__name__}: {exc}. "
            "An op in the graph has no fake-tensor / functionalization support; "
            "run the graph eagerly instead."
        ) from exc
    return finish_functional_graph(traced)


# Ops whose schema does not declare the running statistics they update in place (see
# _batch_norm.py): a graph holding one is never taken as functional.
_UNDECLARED_MUTATIONS = ("batch_norm",)


def already_functional(gm: fx.GraphModule, decompositions: dict) -> bool:
    """Would ``trace_functional(gm, ...)`` only replay ``gm``'s ops one for one?

    True when every call is an ATen op whose schema mutates nothing (no in-place op, no out=, no
    metadata change) and that the table would not decompose, or a ``getitem`` of a multi-output
    op: functionalization then has nothing to rewrite. A higher-order op, any other Python
    callable, or a batch-norm op (its schema hides the running-stat update) says False.
    """
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.op != "call_function":
            return False
        target = node.target
        if target is operator.getitem:
            continue
        if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
            return False
        if target in decompositions or any(w in target.name() for w in _UNDECLARED_MUTATIONS):
            return False
    return True


def _refuse_metadata_mutations(inputs) -> None:
    """An input whose sizes or strides the graph changed in place (x.t_(), x.transpose_(0, 1),
    x.as_strided_(...)) would come back as a copy of values, not a change of geometry: refuse it
    (the graph then runs eagerly) rather than write the wrong thing into the caller's tensor."""
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and has_metadata_mutation(x):
            raise AOTError(
                f"graph input {i} has its sizes or strides changed in place (x.t_(), "
                "x.transpose_(), x.as_strided_()); only value mutations are compiled"
            )


def _writes_in_place(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` mutates anything but its inputs' final values (functionalization's trailing
    ``copy_`` into an input)."""
    inputs = {n for n in gm.graph.nodes if n.op == "placeholder"}
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        if target is aten.copy_.default and node.args[0] in inputs:
            continue
        if target._schema.is_mutable:
            return True
    return False


def finish_functional_graph(traced: fx.GraphModule) -> FunctionalGraph:
    graph = traced.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    index_of = {n: i for i, n in enumerate(placeholders)}
    output = next(n for n in graph.nodes if n.op == "output")
    user_outputs = list(_as_output_tuple(output.args[0]))

    # Functionalization writes the new value of a mutated input back with a trailing
    # aten.copy_(input, new_value); we return new_value instead and let the runtime copy it.
    new_values: dict[int, fx.Node] = {}
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is aten.copy_.default:
            dst, src = node.args[0], node.args[1]
            if dst not in index_of:
                raise AOTError(
                    f"functionalization left an in-place copy into {dst} which is not an input"
                )
            if node.users:
                node.replace_all_uses_with(src)
            new_values[index_of[dst]] = src
            graph.erase_node(node)
    for node in user_outputs:
        if not isinstance(node, fx.Node):
            raise AOTError(
                f"graph output {node!r} is not a tensor; contract C1 asks for a flat tuple of tensors"
            )
    mutated = tuple(sorted(new_values))
    outs = tuple(user_outputs) + tuple(new_values[i] for i in mutated)
    output.args = (outs,)
    _inline_scalar_constants(traced)
    eliminate_common_subexpressions(traced)  # autocast's casts of one input, one per linear
    # an unused index_select still raises in eager when an index is out of range: keep it
    graph.eliminate_dead_code(is_impure_node=keep_impure_or_checking)
    graph.lint()
    traced.recompile()
    return FunctionalGraph(traced, len(user_outputs), mutated)


def _inline_scalar_constants(gm: fx.GraphModule) -> None:
    """Replace lift_fresh_copy(get_attr scalar constant) by aten.full so the graph holds no tensor attrs.

    make_fx stores Python-scalar tensors created during tracing (x[0] = 0) as module constants;
    a one-element constant becomes a full() node, larger ones stay as get_attr nodes.
    """
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(gm, node.target, None)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            continue
        with graph.inserting_after(node):
            full = graph.call_function(
                aten.full.default,
                (list(value.shape), value.item()),
                {"dtype": value.dtype, "device": value.device, "pin_memory": False},
            )
        full.meta.update(node.meta)
        for user in list(node.users):
            if user.op == "call_function" and user.target in (
                aten.lift_fresh_copy.default,
                aten.clone.default,
            ):
                user.replace_all_uses_with(full)
                graph.erase_node(user)
        node.replace_all_uses_with(full)
        graph.erase_node(node)
        if hasattr(gm, node.target):
            delattr(gm, node.target)


def _ambient_fake_mode(args, fake: bool):
    """The FakeTensorMode of fake `args` (to trace symbolic shapes in), or a no-op context."""
    if fake:
        return contextlib.nullcontext()
    for a in args:
        if is_fake(a):
            return a.fake_mode
    raise AOTError("symbolic tracing needs fake example inputs, got only real tensors")


def symbolic_inputs(lifted: LiftedGraph) -> list | None:
    """Fake inputs with symbolic sizes for the lifted graph's placeholders, or None (static shapes).

    Uses the placeholders' meta["example_value"] FakeTensors made by capture; lifted parameters
    without one are fakified in the same FakeTensorMode. None when no size is symbolic.
    """
    vals: list = []
    mode = None
    symbolic = False
    for node in lifted.gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value", node.meta.get("val"))
        if is_fake(val):
            mode = mode or val.fake_mode
            symbolic = symbolic or any(not isinstance(s, int) for s in val.shape)
        elif isinstance(
            val, torch.SymInt
        ):  # an int input of symbolic value (a size passed over a break)
            symbolic = True
        vals.append(val)
    if symbolic and mode is None:
        shape_env = next(v.node.shape_env for v in vals if isinstance(v, torch.SymInt))
        mode = FakeTensorMode(shape_env=shape_env)
    if not symbolic:
        return None
    assert mode is not None  # set from a fake input, or from a SymInt input's shape env above
    params = list(lifted.params)
    for i, val in enumerate(vals):
        if isinstance(val, torch.SymInt):
            continue
        if not is_fake(val):
            if i >= len(params):
                raise AOTError(
                    f"graph input {i} has no fake example_value; capture must set "
                    "node.meta['example_value'] on every placeholder"
                )
            vals[i] = mode.from_tensor(params[i])
    return vals


def aten_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    decompositions: Decompositions | None = None,
) -> tuple[fx.GraphModule, list[Any]]:
    """Lower a torch-level graph (contract C1) to an ATen-level functional graph (contract C2).

    Returns (aten_gm, aten_example_inputs): placeholders are [lifted params/buffers, inputs];
    outputs are [the graph's outputs..., new values of inputs it mutated...] (the runtime made
    by `aot_compile` copies those back; `aten_gm.meta["mutated_inputs"]` lists their indices).
    """
    fg, lifted = functional_graph(gm, example_inputs, decompositions)
    return fg.gm, list(lifted.params) + list(example_inputs)


def functional_graph(
    gm: fx.GraphModule,
    example_inputs: Sequence[torch.Tensor],
    decompositions: Decompositions | None = None,
) -> tuple[FunctionalGraph, LiftedGraph]:
    """Like `aten_graph` but returns (FunctionalGraph, LiftedGraph) with the mutation bookkeeping."""
    decomps = resolve_decompositions(decompositions)
    lifted = lift_parameters(gm)
    fakes = symbolic_inputs(lifted)
    args = list(lifted.params) + list(example_inputs) if fakes is None else fakes
    with torch.no_grad():
        fg = trace_functional(lifted.gm, args, decomps, fake=fakes is None)
    fg.gm.meta["mutated_inputs"] = fg.mutated_inputs
    fg.gm.meta["num_user_outputs"] = fg.num_user_outputs
    fg.gm.meta["constant_outputs"] = lifted.constant_outputs
    return fg, lifted
