"""The joint forward+backward graph: one trace of the forward and torch.autograd.grad.

joint(primals, tangents) runs the (parameter-lifted) graph, then torch.autograd.grad of the
outputs that require grad with the tangents as their incoming gradients. Tracing it with
make_fx + functionalize gives one ATen graph holding both passes, which the partitioner splits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ._batch_norm import BatchNormAsLegit
from ._compat import is_fake
from ._masked_attention import MaskedAttention
from .aliasing import autograd_root
from .errors import AOTError
from .mutation import _dense
from .trace import (
    MAKE_FX_LOCK,
    FunctionalGraph,
    already_functional,
    finish_functional_graph,
    paired_for_autograd,
    trace_functional,
)


@dataclass(frozen=True)
class JointGraph:
    """A traced forward+backward graph and how its inputs and outputs line up.

    gm placeholders: [primals (num_primals)..., tangents (one per differentiable output)...].
    gm outputs: [user outputs..., new values of mutated inputs..., grads of the primals that
    require grad (in order, `grad_inputs`)...]; a grad that autograd returned as None is absent
    and its primal index is not in `grad_inputs`.
    num_fwd_outputs = user outputs + mutated-input values, the outputs the forward graph returns.
    `grad_mutations`: the mutated inputs written in grad mode with a value that requires grad
    (a subset of `mutated_inputs`): their new values are differentiable outputs (in
    `diff_outputs`), which the runtime copies back with autograd recording, as eager's in-place
    op does.
    """

    gm: fx.GraphModule
    num_primals: int
    num_user_outputs: int
    mutated_inputs: tuple[int, ...]
    diff_outputs: tuple[int, ...]
    grad_inputs: tuple[int, ...]
    # (fake inputs, fn(*fake inputs)) of the fake run that found the outputs, static shapes only:
    # the output-alias analysis reads it instead of running the graph once more
    fake_run: tuple[tuple[Any, ...], tuple[Any, ...]] | None = field(
        default=None, compare=False, repr=False
    )
    grad_mutations: tuple[int, ...] = ()
    #: user outputs that require grad but whose backward eager refuses (a value their op saved
    #: was written in place later in the graph), with eager's error: not among `diff_outputs`
    #: (no tangent, nothing traced), they raise it when a gradient reaches them (`poisoned_outputs`)
    poisoned: tuple[tuple[int, str], ...] = ()
    #: per entry of `grad_inputs`, the positions among `diff_outputs` whose value the primal
    #: reaches in the graph: when the tangents of all of them are None (outputs the loss does not
    #: use) the gradient is None, as eager's autograd never reaches the input
    #: (`forward_reach`)
    reaches: tuple[frozenset[int], ...] | None = None

    @property
    def num_fwd_outputs(self) -> int:
        return self.num_user_outputs + len(self.mutated_inputs)


def joint_graph(
    fn: Callable[..., Any],
    primals: Sequence[torch.Tensor],
    decompositions: dict,
    fake_primals: Sequence[torch.Tensor] | None = None,
    entry_grad: bool = True,
) -> JointGraph:
    """Trace fn's forward and backward into one functional ATen graph.

    `primals` are real example tensors; their requires_grad flags decide which grads are traced.
    Static shapes unless `fake_primals` (FakeTensors of one FakeTensorMode, with symbolic sizes,
    matching `primals`) are given: then the graph is traced in that mode and sizes stay symbolic.
    `entry_grad`: the grad mode fn is called in (False: a function called under no_grad whose
    graph enables grad in a region; only what that region computes carries a gradient).
    """
    primals = list(primals)
    decompositions = paired_for_autograd(decompositions)
    grad_idx = [i for i, p in enumerate(primals) if isinstance(p, torch.Tensor) and p.requires_grad]
    symbolic = fake_primals is not None
    # static shapes still get a ShapeEnv (as make_fx's own fake mode has): while_loop's fake run asks for it
    mode = (
        _mode_of(fake_primals)
        if symbolic
        else FakeTensorMode(shape_env=ShapeEnv(), static_shapes=True)
    )
    examples = list(fake_primals) if fake_primals is not None else primals
    # One run on fake copies (no side effects on the user's tensors) gives the outputs' shapes
    # and which of them require grad.
    with mode, torch.set_grad_enabled(entry_grad):
        fake_ins, fake_outs, grad_written = _fake_outputs(fn, examples, primals, mode)
    _refuse_grad_writes_eager_refuses(grad_written, primals)
    diff_idx = [
        i for i, o in enumerate(fake_outs) if isinstance(o, torch.Tensor) and o.requires_grad
    ]
    user_diff = tuple(diff_idx)
    # inputs written in grad mode whose new value's backward eager refuses (poisoned_outputs):
    # still written in a copy and copied back with autograd recording, but given no tangent
    written_diff = grad_written
    num_primals = len(primals)
    n_user = [0]
    none_grads: list[int] = []

    def joint(*args):
        ps, tangents = args[:num_primals], args[num_primals:]
        with torch.set_grad_enabled(entry_grad):
            # an input written in grad mode is written in a copy (a leaf that requires grad
            # refuses an in-place op; one that does not would become a mutated input whose
            # new value carries no gradient): the copy's new value is an output of its own
            work = list(ps)
            for i in grad_written:
                work[i] = ps[i].clone()
            outs = fn(*work)
        with torch.enable_grad():
            outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            n_user[0] = len(outs)
            written = [work[i] for i in grad_written]
            outs = outs + tuple(written)
            diff_outs = [outs[i] for i in user_diff] + [work[i] for i in written_diff]
            inputs = [ps[i] for i in grad_idx]
            grads = (
                torch.autograd.grad(diff_outs, inputs, list(tangents), allow_unused=True)
                if diff_outs
                else [None] * len(inputs)
            )
        none_grads[:] = [grad_idx[k] for k, g in enumerate(grads) if g is None]
        return tuple(outs) + tuple(g for g in grads if g is not None)

    def trace() -> tuple[fx.GraphModule, list[torch.Tensor]]:
        # Tangents are contiguous tensors shaped like the differentiable outputs; the runtime
        # makes the incoming grads contiguous to match.
        with mode if symbolic else contextlib.nullcontext():
            tangents = [
                torch.zeros(o.shape, dtype=o.dtype, device=o.device)
                for o in [fake_outs[i] for i in user_diff] + [fake_ins[i] for i in written_diff]
            ]
            leaves = [
                e.detach().requires_grad_(p.requires_grad) if isinstance(p, torch.Tensor) else e
                for e, p in zip(examples, primals)
            ]
        # Two stages: functionalize's wrappers drop requires_grad, so autograd cannot run under
        # it. Stage 1 traces forward + autograd.grad to ATen (mutations still in place); stage 2
        # replays that graph, which no longer needs autograd, under functionalization.
        try:
            with (
                MAKE_FX_LOCK,
                BatchNormAsLegit(),
                MaskedAttention(),
                mode if symbolic else contextlib.nullcontext(),
            ):
                traced = make_fx(
                    joint,
                    decomposition_table=decompositions,
                    tracing_mode="real" if symbolic else "fake",
                )(*leaves, *tangents)
        except Exception as exc:
            raise AOTError(
                f"tracing the joint forward+backward graph failed: {type(exc).__name__}: {exc}. "
                "An op in the graph has no fake-tensor or autograd support."
            ) from exc
        return traced, tangents

    # (user output index, or -1 - input index for an input's new value; eager's error)
    refused: tuple[tuple[int, str], ...] = ()
    try:
        stage1, tangents = trace()
    except AOTError as exc:
        values = [(i, fake_outs[i]) for i in user_diff]
        values += [(-1 - i, fake_ins[i]) for i in grad_written]
        refused = poisoned_outputs(exc.__cause__, mode, values)
        if not refused:
            raise
        left_out = {i for i, _ in refused}
        user_diff = tuple(i for i in user_diff if i not in left_out)
        written_diff = tuple(i for i in grad_written if -1 - i not in left_out)
        diff_idx = list(user_diff)
        stage1, tangents = trace()
    with mode if symbolic else contextlib.nullcontext():
        plain = [p.detach() if isinstance(p, torch.Tensor) else p for p in examples]
    fg: FunctionalGraph
    if already_functional(stage1, decompositions):
        # stage 2 would replay the same ops one for one (a full second trace, as costly as the
        # first): finish the stage-1 graph as its result would have been finished
        fg = finish_functional_graph(stage1)
    else:
        with torch.no_grad():
            fg = trace_functional(stage1, plain + tangents, decompositions, fake=not symbolic)
    # trace_functional saw [outs..., grads...] as "user outputs"; split them back apart.
    n_out = n_user[0]
    gm = fg.gm
    output = next(n for n in gm.graph.nodes if n.op == "output")
    flat = list(output.args[0])
    n_traced_user = fg.num_user_outputs
    n_written = len(grad_written)
    user, written_values = flat[:n_out], flat[n_out : n_out + n_written]
    grads, mutations = flat[n_out + n_written : n_traced_user], flat[n_traced_user:]
    if any(m >= num_primals for m in fg.mutated_inputs):
        raise AOTError("the backward pass mutated a tangent; this is not supported")
    # the inputs written in grad mode join the other mutated inputs, in input order; their new
    # values are differentiable outputs (after the user outputs' own, as the tangents are)
    by_input = dict(zip(fg.mutated_inputs, mutations)) | dict(zip(grad_written, written_values))
    mutated_inputs = tuple(sorted(by_input))
    mutations = [by_input[i] for i in mutated_inputs]
    diff_idx += [n_out + mutated_inputs.index(i) for i in written_diff]
    # the refused values as forward outputs: user outputs, then the mutated inputs' new values
    poisoned = tuple(
        (i if i >= 0 else n_out + mutated_inputs.index(-1 - i), message) for i, message in refused
    )
    # An input that requires grad and is mutated was written under no_grad (nn.init.*_ on a
    # parameter, an optimizer-like update): autograd allows that on a leaf, and stage 1 traced it
    # with the real autograd on leaves, so the gradient flows to the input through its new value
    # as in eager. A write in grad mode raised in stage 1 already, as eager raises.
    output.args = (tuple(user + mutations + grads),)
    _geometry_from_clones(gm, grad_written, primals)
    if symbolic:
        _sizes_from_primals(gm, num_primals, set(mutated_inputs))
    gm.recompile()
    grad_inputs = tuple(i for i in grad_idx if i not in none_grads)
    forward_outs = user + mutations
    reaches = forward_reach(gm, grad_inputs, [forward_outs[i] for i in diff_idx])
    return JointGraph(
        gm,
        num_primals,
        n_out,
        mutated_inputs,
        tuple(diff_idx),
        grad_inputs,
        None if symbolic else (fake_ins, fake_outs),
        grad_written,
        poisoned,
        reaches,
    )


def forward_reach(
    gm: fx.GraphModule, primals: Sequence[int], outputs: Sequence[Any]
) -> tuple[frozenset[int], ...]:
    """For each primal position in ``primals`` (placeholders of ``gm``), the positions among
    ``outputs`` (nodes of ``gm``) whose value it reaches through the graph's data flow.

    A zero-element input's gradient is computed from no tangent at all (its ops are folded to
    empty tensors), so which tangents it depends on does not say whether autograd reaches it:
    the forward's data flow does (fuzz seed 52301). One pass over the graph, each node's set of
    primals as a bitset."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    bit = {placeholders[p]: 1 << k for k, p in enumerate(primals)}
    seen: dict[fx.Node, int] = {}
    for node in gm.graph.nodes:
        bits = bit.get(node, 0)
        for a in node.all_input_nodes:
            bits |= seen.get(a, 0)
        seen[node] = bits
    return tuple(
        frozenset(j for j, o in enumerate(outputs) if isinstance(o, fx.Node) and seen[o] >> k & 1)
        for k in range(len(primals))
    )


#: the start of autograd's error for a saved tensor written in place after it was saved
_WRITTEN_AFTER_SAVE = "one of the variables needed for gradient computation has been modified"


def poisoned_outputs(
    exc: BaseException | None, mode, values: list[tuple[int, torch.Tensor]]
) -> tuple[tuple[int, str], ...]:
    """Of ``values`` (key, a differentiable value of the fake run: a user output, an input's
    new value), those whose backward raises autograd's error for a saved value written in place
    after it was saved, with that error, when ``exc`` (the joint trace's failure) is that error;
    else ().

    Eager raises it only when a backward reaches such a value's node (``b = a.sin();
    a.mul_(3)``, then a loss over ``b``), so a graph returning ``b`` and ``a`` trains as long as
    the loss does not use ``b``; the joint trace asks for every output's gradient at once, so it
    raised at compile time and the graph ran eagerly. Each value's backward runs alone, as
    ``loss.backward()`` would (every node it reaches), on the fake run's own autograd graph
    (kept: ``retain_graph``; the fake leaves' ``.grad`` is all it writes). A value that raises
    gets no tangent in the traced backward, and the runtime raises eager's error when a
    gradient reaches it."""
    if not isinstance(exc, RuntimeError) or _WRITTEN_AFTER_SAVE not in str(exc):
        return ()
    found = []
    with mode, torch.enable_grad():
        for key, value in values:
            try:
                torch.autograd.backward([value], [torch.zeros_like(value)], retain_graph=True)
            except RuntimeError as err:
                if _WRITTEN_AFTER_SAVE not in str(err):
                    return ()
                found.append((key, str(err)))
    return tuple(found)


_SIZES = (torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default)


def _geometry_from_clones(gm: fx.GraphModule, written: tuple[int, ...], primals) -> None:
    """A symbolic size or stride of an input written in grad mode, read by the backward (the
    shape of its gradient), is read from the clone the graph writes instead: the partitioner
    never saves the input itself (its old value is gone once the new one is written back), and
    a size is recomputed from what is saved, so the min-cut had no finite cut and the graph ran
    eagerly under dynamic shapes. The clone has the input's sizes, and its strides when the
    input is dense (``clone`` preserves them then)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i in written:
        primal = placeholders[i]
        clone = _clone_of(primal)
        if clone is None:
            continue
        dense = not is_fake(primals[i]) and _dense(primals[i])
        readers = _SIZES + ((torch.ops.aten.sym_stride.int,) if dense else ())
        for user in list(primal.users):
            if user.target in readers and user.args[0] is primal:
                user.args = (clone, *user.args[1:])
        # the clone must come before its new readers (the trace put them after the primal)
        order = {n: k for k, n in enumerate(gm.graph.nodes)}
        first = min(clone.users, key=order.__getitem__, default=None)
        if first is not None and order[first] < order[clone]:
            first.prepend(clone)


def _clone_of(primal: fx.Node) -> fx.Node | None:
    """The clone ``joint`` writes in place of an input written in grad mode (same sizes), or
    None when the graph has none."""
    return next((u for u in primal.users if u.target is torch.ops.aten.clone.default), None)


def _sizes_from_primals(gm: fx.GraphModule, num_primals: int, mutated: set[int]) -> None:
    """A symbolic size or stride whose value is a size symbol of an input (``s0``, the input's
    dim 0) is read as that input's size, and one whose value is a number is that number:

    - read from an intermediate (``sym_size(mm, 0)``), the min-cut saved the intermediate (a
      matmul's result, which it may not recompute) only for its size. Eager's matmul backward
      keeps its operands, not its result: a later in-place write of the result (``h[:, 0] *= 2``
      after a break) then failed the compiled backward ("modified by an inplace operation")
      where eager's ran;
    - read from an input written in place, it had no finite cut (its old value is gone once the
      new one is written back, so the cut may not save it): the strides of an input written in
      grad mode that ``_geometry_from_clones`` leaves (of no element: ``clone`` need not keep
      them) are its sizes' products, read from the clone's sizes (training fuzz seed 4414).

    A written input's sizes are read from the clone the graph writes (same sizes), never from
    the input itself."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    sources: dict[sympy.Symbol, tuple[fx.Node, int]] = {}
    for i, node in enumerate(placeholders[:num_primals]):
        holder: fx.Node | None = node
        if i in mutated:
            holder = _clone_of(node)
        val = node.meta.get("val")
        if holder is None or not isinstance(val, torch.Tensor):
            continue
        for dim, size in enumerate(val.shape):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                sources.setdefault(size.node.expr, (holder, dim))
    size_of, stride_of = torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int
    index = {n: i for i, n in enumerate(placeholders)}
    for node in list(gm.graph.nodes):
        if node.target not in (size_of, stride_of):
            continue
        read, val = node.args[0], node.meta.get("val")
        written = index.get(read) in mutated
        expr = val.node.expr if isinstance(val, torch.SymInt) else val
        if isinstance(expr, (int, sympy.Integer)):
            if written:  # a number: no tensor to read it from
                _replace_with_number(node, int(expr))
            continue
        source = sources.get(expr)
        # an unwritten input's own size, or the source itself, is where it should be
        in_place = node.target is size_of and (
            (read in index and not written) or (read, node.args[1]) == source
        )
        if source is not None and not in_place and order[source[0]] < order[node]:
            node.target, node.args = size_of, source


def _replace_with_number(node: fx.Node, value: int) -> None:
    """Every use of ``node`` (a size or stride read) takes ``value`` instead; ``node`` goes."""
    for user in list(node.users):
        user.args = fx.node.map_arg(user.args, lambda a: value if a is node else a)
        user.kwargs = fx.node.map_arg(user.kwargs, lambda a: value if a is node else a)
    node.graph.erase_node(node)


def _mode_of(fakes) -> FakeTensorMode:
    for f in fakes:
        if is_fake(f):
            return f.fake_mode
    raise AOTError("fake_primals holds no FakeTensor")


def _fake_outputs(fn, examples, primals, mode):
    """One run of ``fn`` on fake copies of the inputs: (the fake inputs, the outputs, the inputs
    written in grad mode with a value that requires grad, in order).

    An input that requires grad is passed as a non-leaf over the same memory (a leaf refuses an
    in-place op in grad mode, where eager's input, made by an earlier graph or a break's step, is
    no leaf); one that does not is passed as the leaf it is. Written in grad mode, the first gets
    a new ``grad_fn``, the second starts requiring grad (``z[:, 1:] = s``)."""
    fakes = [
        (e if is_fake(e) else mode.from_tensor(e)).detach().requires_grad_(p.requires_grad)
        if isinstance(p, torch.Tensor)
        else e
        for e, p in zip(examples, primals)
    ]
    passed: list[Any] = list(fakes)
    history: dict[int, Any] = {}
    with torch.enable_grad():
        for i, fake in enumerate(fakes):
            if (
                isinstance(fake, torch.Tensor)
                and fake.requires_grad
                and torch._debug_has_internal_overlap(fake) != 1
            ):
                stand_in = fake.detach()
                stand_in.copy_(fake)  # a non-leaf: its grad_fn is this copy until a write
                passed[i], history[i] = stand_in, stand_in.grad_fn
    outs = fn(*passed)
    written = tuple(
        i
        for i, (arg, p) in enumerate(zip(passed, primals))
        if isinstance(p, torch.Tensor)
        and (
            arg.grad_fn is not history[i]
            if i in history
            # passed as it is: written when it starts requiring grad (``z[:, 1:] = s``); one
            # that required grad already (an expanded input: no stand-in) was not written
            else arg.requires_grad and not p.requires_grad
        )
    )
    # the stand-ins are the inputs the output-alias analysis compares with (``out is input``)
    return tuple(passed), (tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)), written


def _refuse_grad_writes_eager_refuses(written: tuple[int, ...], primals) -> None:
    """Inputs written in grad mode are compiled when eager allows the write: not a leaf that
    requires grad, nor a view of one (a parameter: eager raises, and so does the graph run
    eagerly). One that shares its memory with another input is traced through a synthetic base
    (aliasing.py), whose write reaches every alias."""
    for i in written:
        root = autograd_root(primals[i])
        if root.requires_grad and root.is_leaf:
            raise AOTError(
                f"graph input {i} is a leaf that requires grad, or a view of one, written in "
                "place in grad mode (eager raises)"
            )
