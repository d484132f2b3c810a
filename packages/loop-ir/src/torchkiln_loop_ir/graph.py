"""Lowering an ATen FX graph to the loop IR (``lower``), with the realize policy.

Every ATen node is handed to its lowering in ``LOWERINGS``; ops without one (or whose lowering
declines with ``Unlowerable``) become an ``ExternKernel`` of kind "fallback" running the ATen
kernel. Pointwise results stay unrealized (inlined into their consumers) unless a reason says
they must live in memory; the reason is recorded on the ``ComputedBuffer``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree

from .backend import BackendCapabilities, SymbolSource, target_programs
from .errors import Unlowerable
from .float_sizes import FloatSizeExpr
from .fx_sizes import from_torch_sympy, layout_of, to_expr
from .inline_cost import (
    BROADCAST_RATIO,
    MAX_RECOMPUTE_OPS,
    count_reads_and_ops,
    max_recompute_ops,
    recompute_is_cheaper,
)
from .ir import (
    Buffer,
    ComputedBuffer,
    ExternKernel,
    FixedLayout,
    GraphIR,
    InputBuffer,
    IRNode,
    NamedView,
    Pointwise,
    Reduction,
    ReinterpretView,
    contiguous_strides,
)
from .options import LoopIROptions


@dataclass
class LoweringContext:
    """What a lowering function sees: the graph being built and the node being lowered."""

    graph: GraphLowering
    node: torch.fx.Node

    @property
    def meta(self) -> Any:
        return self.node.meta.get("val")

    @property
    def out_dtype(self) -> torch.dtype:
        return self.meta.dtype

    @property
    def out_size(self) -> tuple[sympy.Expr, ...]:
        return tuple(to_expr(s) for s in self.meta.shape)

    @property
    def device(self) -> torch.device:
        return self.meta.device

    def realize(self, value: IRNode, reason: str) -> Buffer | ReinterpretView:
        return self.graph.realize(value, reason, self.node)

    def reduction(self, red: Reduction) -> ComputedBuffer:
        return self.graph.realize_reduction(red, self.node)

    def extern(
        self,
        op: Any,
        args: Sequence[Any],
        kwargs: dict,
        *,
        kind: str = "extern",
        reason: str = "",
        fx_args: tuple | None = None,
    ) -> Any:
        """``op`` called on ``args``; ``fx_args`` are the FX arguments matching them (the
        node's own by default), whose traced strides the IR arguments are realized with."""
        return self.graph.extern(
            op, tuple(args), kwargs, self.node, kind=kind, reason=reason, fx_args=fx_args
        )


def _no_element(val: Any) -> bool:
    """Whether a node's value is a tensor of a known size 0 in some dim (sizes 0 are never
    symbolic: dynamic shapes specialise them)."""
    return isinstance(val, torch.Tensor) and any(isinstance(s, int) and s == 0 for s in val.shape)


class GraphLowering:
    """Walks an ATen graph and builds its ``GraphIR``."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: Sequence[Any],
        options: LoopIROptions,
        capabilities: BackendCapabilities | None = None,
    ) -> None:
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.options = options
        # the code generator's, when the caller passes them: lowering reads parallel_programs
        self.capabilities = capabilities
        self.nodes: list[Any] = []
        self.inputs: list[InputBuffer] = []
        self.size_symbols: dict[sympy.Symbol, SymbolSource] = {}
        #: symbols bound by an extern call's scalar result (``.item()``), not by an input
        self.scalar_symbols: set[sympy.Symbol] = set()
        # (input position, "size"/"stride"/"value", dim, expression) of every input size/stride
        self._symbol_sites: list[
            tuple[int, Literal["size", "stride", "value"], int, sympy.Expr]
        ] = []
        self.fallbacks: list[str] = []
        self.extern_calls: list[str] = []
        self._count = 0
        self._seeds: tuple[str, torch.device] | None = None  # the seed buffer of random ops
        self._num_seeds = 0
        self._counted: tuple[Any, tuple[int, int, int]] = (
            None,
            (0, 0, 0),
        )  # the last Pointwise and its counts
        self.kept: list[str] = []  # buffers of unused nodes, computed for their checks
        # name -> buffer of self.inputs / self.nodes, and how many of each it has seen
        self._buffers: dict[str, Buffer] = {}
        self._buffers_seen = (0, 0)
        # id(Pointwise) -> (it, its buffer): a value realized twice shares one buffer
        self._realized: dict[int, tuple[Pointwise, ComputedBuffer]] = {}

    def parallel_programs(self, device: torch.device) -> int:
        """Programs a kernel on ``device`` should launch to fill it (the target of split
        reductions): ``LoopIROptions.split_programs``, else the backend's
        ``BackendCapabilities.parallel_programs``, else ``default_parallel_programs``."""
        return target_programs(self.options.split_programs, self.capabilities, device)

    def next_seed(self, device: torch.device) -> tuple[str, int]:
        """(seed buffer, position) of a fresh per-call seed for one random op."""
        if self._seeds is None:
            self._seeds = (self.new_name(), torch.device(device))
        self._num_seeds += 1
        return self._seeds[0], self._num_seeds - 1

    def _seed_step(self) -> None:
        """Put the step filling the seed buffer first: ``aten.randint`` on every call."""
        assert self._seeds is not None  # called only once a random op asked for seeds
        name, device = self._seeds
        n = self._num_seeds
        out = Buffer(
            name, FixedLayout(device, torch.int64, (sympy.Integer(n),), (sympy.Integer(1),))
        )
        spec = pytree.tree_flatten(torch.empty(0))[1]
        ek = ExternKernel(
            torch.ops.aten.randint.low,
            (0, 2**31 - 1, [n]),
            {"dtype": torch.int64, "device": device},
            (out,),
            spec,
            kind="extern",
            reason="per-call seeds of the random ops",
            origin="seeds",
        )
        self.nodes.insert(0, ek)
        self.extern_calls.insert(0, "aten.randint.low")

    def new_name(self) -> str:
        name = f"buf{self._count}"
        self._count += 1
        return name

    # -- realization --------------------------------------------------------------------------
    def realize(
        self,
        value: Any,
        reason: str,
        node: torch.fx.Node | None = None,
        strides: Sequence[Any] | None = None,
    ) -> Any:
        """Give ``value`` a place in memory (no-op for buffers and views of buffers);
        ``strides``: its layout's, where not the node's traced ones."""
        if isinstance(value, (Buffer, ReinterpretView)):
            return value
        if isinstance(value, Pointwise):
            val = node.meta.get("val") if node is not None and strides is None else None
            if isinstance(val, (tuple, list)):
                # one result of a multi-output op (max-pool's values): the meta value of the
                # same size and dtype gives its strides (channels-last stays channels-last)
                val = next(
                    (
                        v
                        for v in val
                        if isinstance(v, torch.Tensor)
                        and tuple(to_expr(s) for s in v.shape) == value.ranges
                        and v.dtype == value.dtype
                    ),
                    None,
                )
            if (
                isinstance(val, torch.Tensor)
                and tuple(to_expr(s) for s in val.shape) == value.ranges
                and val.dtype == value.dtype
            ):
                layout = layout_of(val)
            else:
                strides = strides if strides is not None else contiguous_strides(value.ranges)
                layout = FixedLayout(value.device, value.dtype, value.ranges, tuple(strides))
            # one buffer per value: a ReLU recomputed in the backward feeds two convolution
            # backwards (a block's conv and its shortcut's); each realizing it would hold two
            # copies from where the scheduler computes them to their extern calls
            earlier = self._realized.get(id(value))
            if earlier is not None and earlier[0] is value and earlier[1].layout == layout:
                return earlier[1]
            buf = ComputedBuffer(
                self.new_name(),
                layout,
                data=value,
                reason=reason,
                origin=node.name if node is not None else "",
            )
            self.nodes.append(buf)
            self._realized[id(value)] = (value, buf)
            return buf
        raise TypeError(f"cannot realize {type(value).__name__}")

    def realize_reduction(self, red: Reduction, node: torch.fx.Node) -> ComputedBuffer:
        layout = FixedLayout(red.device, red.dtype, red.ranges, contiguous_strides(red.ranges))
        buf = ComputedBuffer(
            self.new_name(), layout, data=red, reason="reduction", origin=node.name
        )
        self.nodes.append(buf)
        return buf

    def named(
        self, value: Any, reason: str, node: torch.fx.Node | None = None
    ) -> Buffer | NamedView:
        """A realized value with a name of its own (views of buffers get a ``NamedView``)."""
        value = self.realize(value, reason, node)
        if isinstance(value, ReinterpretView):
            if value.layout == value.base.layout:
                return value.base
            nv = NamedView(self.new_name(), value)
            self.nodes.append(nv)
            return nv
        return value

    def extern(
        self,
        op: Any,
        args: tuple,
        kwargs: dict,
        node: torch.fx.Node,
        *,
        kind: str,
        reason: str,
        fx_args: tuple | None = None,
    ) -> Any:
        # Realize each IR argument with the strides eager gave it at trace time (its FX node's
        # meta): ATen kernels choose their result strides from their inputs' strides.
        fx_leaves = pytree.tree_leaves(fx_args if fx_args is not None else (node.args, node.kwargs))
        leaves, spec = pytree.tree_flatten((args, kwargs))
        fx_of = fx_leaves if len(fx_leaves) == len(leaves) else [None] * len(leaves)

        def leaf(x, fx):
            if isinstance(x, IRNode):
                return self.named(
                    x, f"input of {kind} kernel {op}", fx if isinstance(fx, torch.fx.Node) else None
                )
            return x

        args, kwargs = pytree.tree_unflatten([leaf(x, fx) for x, fx in zip(leaves, fx_of)], spec)
        val = node.meta.get("val")
        flat, spec = pytree.tree_flatten(val)
        outputs: list[Buffer | None] = []
        for v in flat:
            if isinstance(v, torch.Tensor):
                outputs.append(Buffer(self.new_name(), layout_of(v, dense_only=False)))
            else:
                outputs.append(None)
        # a scalar result that is a fresh size symbol (``.item()``: u0) is bound by this call
        scalars = tuple(
            str(to_expr(v))
            if o is None
            and isinstance(v, torch.SymInt)
            and isinstance(to_expr(v), sympy.Symbol)
            and to_expr(v) not in self.size_symbols
            else ""
            for o, v in zip(outputs, flat)
        )
        self.scalar_symbols.update(sympy.Symbol(s, integer=True) for s in scalars if s)
        ek = ExternKernel(
            op,
            args,
            kwargs,
            tuple(outputs),
            spec,
            kind=kind,
            reason=reason,
            origin=node.name,
            scalars=scalars if any(scalars) else (),
        )
        self.nodes.append(ek)
        (self.extern_calls if kind == "extern" else self.fallbacks).append(_op_name(op))
        result = [b if b is not None else v for b, v in zip(outputs, flat)]
        return pytree.tree_unflatten(result, spec)

    # -- the walk -----------------------------------------------------------------------------
    def run(self) -> GraphIR:
        from .lowering import LOWERINGS

        env: dict[torch.fx.Node, Any] = {}
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for pos, (n, real) in enumerate(zip(placeholders, self.example_inputs)):
            env[n] = self._placeholder(pos, n, real)
        self._bind_symbols()
        outputs: list[Any] = []
        for n in self.gm.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                outputs = self._outputs(n, env)
                continue
            if n.op == "get_attr":
                sub = _attr_value(self.gm, n.target)
                if not isinstance(sub, torch.fx.GraphModule):
                    raise Unlowerable("get_attr nodes are not expected in an ATen graph")
                # a control-flow operator's branch or body: a constant argument of its extern call
                env[n] = sub
                continue
            args, kwargs = pytree.tree_map(
                lambda a: env[a] if isinstance(a, torch.fx.Node) else a, (n.args, n.kwargs)
            )
            if n.target is operator.getitem:
                env[n] = args[0][args[1]]
                continue
            val = n.meta.get("val")
            known = set(self.size_symbols) | self.scalar_symbols
            if (
                isinstance(val, torch.SymFloat)
                and sympy.sympify(val.node.expr).free_symbols <= known
            ):
                # a float computed from sizes (a batch norm's n / (n - 1) under a symbolic
                # batch): written as arithmetic where an op reads it (float_sizes.py)
                env[n] = FloatSizeExpr(from_torch_sympy(sympy.sympify(val.node.expr)))
                continue
            if (
                isinstance(val, torch.SymFloat)
                or n.target is aten_local_scalar_dense
                and not isinstance(val, torch.SymInt)
            ):
                # kernels take integer sizes only: a float (or bool) read from a tensor at run time
                # has no place to live; refused here (the graph runs eagerly), never left unbound
                raise Unlowerable(
                    f"a {type(val).__name__} value computed at run time (.item() of a "
                    "float or bool tensor): kernels take integer sizes only"
                )
            if (
                isinstance(val, torch.SymBool)
                and sympy.sympify(val.node.expr).free_symbols <= known
            ):
                # a condition on sizes (torch._check's argument): read by _assert_scalar's lowering
                env[n] = sympy.sympify(val.node.expr)
                continue
            if isinstance(val, torch.SymInt) and to_expr(val).free_symbols <= known:
                # a size computation (sym_size, s0 // 2): its expression over the input sizes,
                # which the wrapper and kernels compute themselves: no kernel, no fallback
                env[n] = to_expr(val)
                continue
            value = self._lower_node(n, args, kwargs, LOWERINGS)
            env[n] = self._maybe_realize(n, value)
            if not n.users:
                self._keep_unused(n, env[n])
            elif _no_element(val):
                # a result with no element reads nothing of its inputs, so an input's own
                # checks (an out-of-range index: ``x[i][-1:-1]``, eager raises) would never run
                # where it has no other reader: computed anyway, as eager computes it (fuzz seed
                # 780090)
                for a in n.all_input_nodes:
                    if a.op != "placeholder" and a in env:
                        self._keep_unused(a, env[a])
        if self._seeds is not None:
            self._seed_step()
        return GraphIR(
            self.inputs,
            self.size_symbols,
            self.nodes,
            outputs,
            self.fallbacks,
            self.extern_calls,
            [n.name for n in placeholders],
            self.kept,
        )

    def _keep_unused(self, n: torch.fx.Node, value: Any) -> None:
        """Compute a node nobody reads: the graph's producer kept it for the error it raises
        (an out-of-range index: aot-partition's dead-code rule), which its kernel checks."""
        if isinstance(value, Pointwise):
            value = self.realize(value, "unused, computed for its checks", n)
        leaves = [
            v
            for v in pytree.tree_leaves(value)
            if isinstance(v, Buffer) and not isinstance(v, InputBuffer)
        ]
        self.kept += [b.name for b in leaves]

    def _lower_node(self, n: torch.fx.Node, args, kwargs, lowerings) -> Any:
        ctx = LoweringContext(self, n)
        args = pytree.tree_map(lambda a: to_expr(a) if isinstance(a, torch.SymInt) else a, args)
        fn = lowerings.get(n.target)
        if fn is None and hasattr(n.target, "overloadpacket"):
            fn = lowerings.get(n.target.overloadpacket)
        if fn is not None and _touches_complex(n):
            # no kernel computes with complex values: ATen's kernel does (an FFT's input cast,
            # view_as_real of its result), and kernels take over from the real values
            return ctx.extern(
                n.target, args, kwargs, kind="fallback", reason="complex values (ATen's kernel)"
            )
        if fn is not None and self.options.fallback_random and _draws_random(n.target):
            # eager's kernel on eager's generator, in graph order: eager's numbers and state
            return ctx.extern(
                n.target,
                args,
                kwargs,
                kind="extern",
                reason="fallback_random: a random op runs as ATen, drawing as eager does",
            )
        if fn is not None:
            mark = len(self.nodes)
            marks = (len(self.fallbacks), len(self.extern_calls))
            try:
                value = fn(ctx, *args, **kwargs)
                if isinstance(value, Pointwise):
                    # run the body once now, so its bugs fall back here; _maybe_realize reuses the counts
                    self._counted = (value, count_reads_and_ops(value))
                return value
            except Unlowerable as e:
                reason = f"lowering declined: {e}"
            except Exception as e:  # noqa: BLE001 - a lowering bug must not break the user's program: use ATen
                reason = f"lowering failed: {type(e).__name__}: {e}"
            for dropped in self.nodes[mark:]:  # drop anything the abandoned lowering realized
                if isinstance(dropped, ComputedBuffer) and isinstance(dropped.data, Pointwise):
                    self._realized.pop(id(dropped.data), None)
            del self.nodes[mark:]
            del self.fallbacks[marks[0] :], self.extern_calls[marks[1] :]
            return ctx.extern(n.target, args, kwargs, kind="fallback", reason=reason)
        if _is_custom_op(n.target):
            # a user's operator (torch.library): its own kernel is the implementation, so it is a
            # named extern call, not a fallback for a missing lowering
            return ctx.extern(n.target, args, kwargs, kind="extern", reason="custom operator")
        return ctx.extern(n.target, args, kwargs, kind="fallback", reason="no lowering")

    def _placeholder(self, pos: int, n: torch.fx.Node, real: Any) -> Any:
        val = n.meta.get("val", real)
        if not isinstance(val, torch.Tensor):
            if isinstance(val, torch.SymInt):
                expr = to_expr(val)
                self._symbol_sites.append((pos, "value", -1, expr))
                return expr
            return val
        size = tuple(to_expr(s) for s in val.shape)
        stride = tuple(to_expr(s) for s in val.stride())
        self._symbol_sites += [(pos, "size", dim, s) for dim, s in enumerate(size)]
        self._symbol_sites += [(pos, "stride", dim, s) for dim, s in enumerate(stride)]
        buf = InputBuffer(n.name, FixedLayout(val.device, val.dtype, size, stride))
        self.inputs.append(buf)
        return buf

    def _bind_symbols(self) -> None:
        """Say where the wrapper reads each size symbol of the inputs: a size, else a stride (a
        symbol only a stride shows: a transposed or step-sliced input), else the one unknown of
        an expression it solves for (a stride ``2*s37``). Bound in dependency order."""
        sites = [site for site in self._symbol_sites if not site[3].is_number]
        for attr in ("value", "size", "stride"):
            for pos, a, dim, expr in sites:
                if a == attr and isinstance(expr, sympy.Symbol) and expr not in self.size_symbols:
                    self.size_symbols[expr] = SymbolSource(pos, a, dim)
        read = sympy.Symbol("_v", integer=True)
        progress = True
        while progress:
            progress = False
            for pos, a, dim, expr in sites:
                unknown = expr.free_symbols - set(self.size_symbols)
                if len(unknown) != 1:
                    continue
                (sym,) = unknown
                solved = _solve_for(expr, sym, read)
                if solved is not None:
                    self.size_symbols[sym] = SymbolSource(pos, a, dim, solved)
                    progress = True

    def _maybe_realize(self, n: torch.fx.Node, value: Any) -> Any:
        if not isinstance(value, Pointwise):
            return value
        counted, counts = self._counted
        reads, ops, full_reads = counts if counted is value else count_reads_and_ops(value)
        users = len(n.users)
        if any(u.op == "output" for u in n.users):
            # realized here, not when the output node is reached: in program order, so what it
            # reads dies here (a backward's weight gradient cast to float32 right after its mm,
            # not every mm result held to the end of the graph)
            return self.realize(value, "graph output", n)
        if reads > self.options.inline_max_reads:
            return self.realize(value, f"too many reads to inline ({reads})", n)
        if _read_as_memory(n, expanded=True):
            # an extern kernel reads it expanded (a bias broadcast over the batch into the
            # memory-efficient attention): stored at its own size, the kernel reads a view of it
            # with stride 0 along the broadcast dims, as eager passes it. Realized expanded, it was
            # computed and written once per batch row (T5's position bias: 16 x 12 x 512 x 512
            # with its bucket arithmetic, 0.29 ms on an H100, session 41)
            return self.realize(value, "read expanded by an extern kernel (passed as a view)", n)
        if ops > BROADCAST_MAX_OPS and (factor := _broadcast_factor(n)) >= BROADCAST_RATIO:
            # inlined, a consumer over a larger space recomputes it at each of its elements:
            # T5's relative position bias (bucket arithmetic, a log and a gather over (1, heads,
            # S, S)) ran once per batch row inside each layer's softmax, in all three of its
            # passes (CPU, small T5 at batch 32: 2.8 ms a layer, session 33)
            # stored in the order its one consumer reads it through a permute: T5's position
            # bias, (queries, keys, heads) from its embedding, read as (heads, queries, keys)
            # by the add of the padding mask over 16 x 12 x 512 x 512, was read 12 elements
            # apart (0.29 ms on an H100 for 100 MB written, session 42)
            return self.realize(
                value,
                f"read broadcast over {factor}x its size ({ops} ops an element)",
                n,
                _permuted_strides(n, value.ranges),
            )
        # recomputed in each consumer, a value of one full read (plus broadcast reads: a row's
        # max, a bias) re-reads no more than its buffer would be read, and writes nothing: a
        # softmax's x - max stays inline into its sum of exp and into a cross-entropy's
        # gather, so the row's max and sum can share one loop (codegen-triton's online softmax)
        if users > 1 and _read_as_memory(n):
            # an extern kernel (a matmul, a convolution) or a fallback reads it: it is written
            # to memory for that one anyway, so the other consumers read it there instead of
            # recomputing it (BERT's layer norm output feeds the next matmul and the residual
            # add: recomputed, the add's kernel read the pre-norm sum and wrote it out again,
            # 4 full passes where 3 do)
            return self.realize(value, f"input of extern, read by {users - 1} more consumer(s)", n)
        if users > 1 and (full_reads > 1 or ops > 4):
            max_ops = self.options.recompute_max_ops
            if max_ops is None:
                max_ops = max_recompute_ops(value.get_device())
                if max_ops < MAX_RECOMPUTE_OPS and _consumers_meet(n):
                    # every consumer flows into one expression, which computes the value once
                    # (a hard-swish of an upsampled input reads it twice): nothing is
                    # recomputed, so the device's lower limit does not apply
                    max_ops = MAX_RECOMPUTE_OPS
            if recompute_is_cheaper(value, users, ops, self._buffer_named, max_ops):
                return value  # each consumer reads the inputs instead (inline_cost.py)
            return self.realize(
                value,
                f"reused by {users} consumers and expensive ({reads} reads, "
                f"{full_reads} of them full, {ops} ops)",
                n,
            )
        return value

    def _buffer_named(self, name: str) -> Buffer | None:
        """The input or realized buffer called ``name`` (extern results included), or None."""
        known = self._buffers
        # min: an abandoned lowering deletes the nodes it realized (their names are never read)
        seen_inputs, seen_nodes = (
            min(seen, len(held))
            for seen, held in zip(self._buffers_seen, (self.inputs, self.nodes))
        )
        for node in self.inputs[seen_inputs:]:
            known[node.name] = node
        for node in self.nodes[seen_nodes:]:
            outs = node.outputs if isinstance(node, ExternKernel) else (node,)
            for out in outs:
                if isinstance(out, Buffer):
                    known[out.name] = out
        self._buffers_seen = (len(self.inputs), len(self.nodes))
        return known.get(name)

    def _outputs(self, n: torch.fx.Node, env) -> list[Any]:
        outs = []
        vals = n.args[0] if isinstance(n.args[0], (tuple, list)) else (n.args[0],)
        for a in vals:
            v = env[a] if isinstance(a, torch.fx.Node) else a
            if isinstance(v, IRNode):
                v = self.named(v, "graph output", a if isinstance(a, torch.fx.Node) else None)
            outs.append(v)
        return outs


#: a pointwise value of more ops an element than this, read by a consumer over at least
#: ``BROADCAST_RATIO`` times as many elements, is realized (computed once, read from cache)
BROADCAST_MAX_OPS = 8


def _broadcast_factor(n: torch.fx.Node) -> int:
    """How many times more elements than ``n`` its largest consumer computes (through views:
    ``unsqueeze``, ``expand``, ``permute``, ...), 1 when a size is symbolic or unknown."""

    def numel(node: Any) -> int | None:
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        count = val.numel() if isinstance(val, torch.Tensor) else None
        return count if isinstance(count, int) else None  # a SymInt: symbolic sizes

    own = numel(n)
    if not own:
        return 1
    largest = own
    stack, seen = [n], {n}
    while stack:
        node = stack.pop()
        for user in node.users:
            if user in seen or user.op != "call_function":
                continue
            seen.add(user)
            target = user.target
            if isinstance(target, torch._ops.OpOverload) and target.is_view:
                stack.append(user)
                continue
            size = numel(user)
            if size is None:
                return 1
            largest = max(largest, size)
    return largest // own


def _permuted_strides(n: torch.fx.Node, ranges: Sequence[Any]) -> tuple[Any, ...] | None:
    """Contiguous strides of ``n`` in the order of the one ``permute`` that is its only user
    (the permuted view then walks memory contiguously), or None: another user, no permute, or
    a permute that keeps the order."""
    if len(n.users) != 1:
        return None
    (user,) = n.users
    if user.target is not torch.ops.aten.permute.default or len(ranges) < 2:
        return None
    order: Any = user.args[1]  # the permute's dims, ints
    dims = [int(d) % len(ranges) for d in order]
    if dims == sorted(dims):
        return None
    strides: list[Any] = [None] * len(ranges)
    for d, stride in zip(dims, contiguous_strides([ranges[d] for d in dims])):
        strides[d] = stride
    return tuple(strides)


def _consumers_meet(n: torch.fx.Node) -> bool:
    """Whether every consumer of ``n`` flows into one node through elementwise ops of one
    consumer each (``torch.Tag.pointwise``), so a kernel computing that node computes ``n`` once
    per element: the paths of ``x * relu6(x + 3)`` meet at the product. A path stops at the
    first node that is not such an op (a reduction: its result is read in a later pass, where
    the value is computed again), which it still reaches."""

    def path(node: torch.fx.Node) -> set[torch.fx.Node]:
        seen = {node}
        while (
            isinstance(node.target, torch._ops.OpOverload)
            and torch.Tag.pointwise in node.target.tags
            and len(node.users) == 1
        ):
            (node,) = node.users
            seen.add(node)
        return seen

    paths = [path(user) for user in n.users]
    return bool(set.intersection(*paths)) if paths else False


def _read_as_memory(n: torch.fx.Node, expanded: bool = False) -> bool:
    """Whether an op that reads memory (an extern kernel: ``READS_MEMORY``, or an op with no
    lowering, run as a fallback) reads ``n`` or a view of it; with ``expanded``, only through a
    view that expands it (more elements than ``n``: ``expand``, or a broadcasting view)."""
    from .lowering import LOWERINGS
    from .lowering.extern import READS_MEMORY

    def numel(node: torch.fx.Node) -> int | None:
        val = node.meta.get("val")
        count = val.numel() if isinstance(val, torch.Tensor) else None
        return count if isinstance(count, int) else None  # a SymInt: symbolic sizes

    own = numel(n)
    if expanded and own is None:
        return False
    stack, seen = [(n, not expanded)], {n}
    while stack:
        node, counts = stack.pop()
        for user in node.users:
            target = user.target
            if user in seen or user.op != "call_function":
                continue
            if not isinstance(target, torch._ops.OpOverload):
                continue
            lowered = target in LOWERINGS or target.overloadpacket in LOWERINGS
            if counts and (target in READS_MEMORY or not lowered):
                return True
            if target.is_view and user.args and user.args[0] is node:
                # a view of it (not an op reading its size)
                seen.add(user)
                grows = own is not None and (numel(user) or 0) > own
                stack.append((user, counts or grows))
    return False


def _touches_complex(n: torch.fx.Node) -> bool:
    """Whether ``n`` reads or makes a complex tensor."""
    values = [n.meta.get("val")] + [a.meta.get("val") for a in n.all_input_nodes]
    return any(
        isinstance(v, torch.Tensor) and v.dtype.is_complex for v in pytree.tree_leaves(values)
    )


def _draws_random(op: Any) -> bool:
    """An ATen op that draws from a random generator (rand, bernoulli, native_dropout, ...)."""
    return isinstance(op, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in op.tags


def _is_custom_op(op: Any) -> bool:
    """An operator of a namespace other than torch's own (aten, prims, ...): a torch.library op."""
    namespace = getattr(op, "namespace", None)
    return isinstance(op, torch._ops.OpOverload) and namespace not in (
        None,
        "aten",
        "prims",
        "_c10d_functional",
        "c10d_functional",
        "rngprims",
        "quantized",
    )


def _op_name(op: Any) -> str:
    """``aten.mm`` / ``aten.scatter.value``: the op's qualified name, default overload omitted."""
    name = str(getattr(op, "_name", None) or getattr(op, "__name__", str(op)))
    return name.replace("::", ".")


def _solve_for(expr: sympy.Expr, sym: sympy.Symbol, read: sympy.Symbol) -> sympy.Expr | None:
    """``sym`` as an expression of ``read`` (the value of ``expr`` read at run time), when
    ``expr == read`` has exactly one solution free of integer-division helpers; else None."""
    if expr.has(sympy.Function):
        return None
    try:
        solutions = sympy.solve(sympy.Eq(expr, read), sym)
    except (NotImplementedError, TypeError, ValueError):
        return None
    if len(solutions) != 1 or solutions[0].has(sympy.Function) or not solutions[0].free_symbols:
        return None
    return solutions[0]


def lower(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    options: LoopIROptions | None = None,
    capabilities: BackendCapabilities | None = None,
) -> GraphIR:
    """Lower an ATen graph (contract C2's ``aten_gm``) to the loop IR, for a backend of
    ``capabilities`` (None: decided from the tensors' devices, ``GraphLowering.parallel_programs``)."""
    return GraphLowering(gm, example_inputs, options or LoopIROptions(), capabilities).run()


__all__ = [
    "GraphLowering",
    "LoweringContext",
    "count_reads_and_ops",
    "from_torch_sympy",
    "layout_of",
    "lower",
    "to_expr",
]


aten_local_scalar_dense = torch.ops.aten._local_scalar_dense.default


def _attr_value(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in str(target).split("."):
        value = getattr(value, part, None)
    return value
