"""The FX graph under construction, and the generated code that calls the compiled graph."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import operator
import re
import warnings
from collections.abc import Mapping

import sympy
import torch
import torch._guards
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
    compute_unbacked_bindings,
)
from torchkiln_guards import Guard, ShapeGuard, StorageAliasGroups, TensorMatch

from . import trace_rules
from ._codegen import Namespace, signature_text
from ._dtype_probe import kernel_missing
from ._guards import SameObjectMatch
from ._op_args import _contains_tensor, _has_negative_nan, _is_bool, _is_subtraction, _map
from ._overlap import inplace_partial_overlap, inplace_self_overlap
from ._reconstruct import Reconstructor
from ._sources import source_code
from .automatic_dynamic import EveryDim
from .exc import Unsupported
from .side_effects import SideEffects
from .variables.base import ConstantVariable, DeletedVariable, VariableTracker
from .variables.containers import (
    ListVariable,
    TupleVariable,
)
from .variables.objects import python_override
from .variables.symbolic import SymNodeVariable
from .variables.tensors import TensorVariable

_SIMPLE = (int, float, bool, str, type(None))


@dataclasses.dataclass(frozen=True)
class _IntInputSource(torch._guards.Source):
    """The ShapeEnv's name for an int input's symbol (its guards are ours: ShapeGuard "value")."""

    text: str

    # torch 2.13 reads ``name`` and ``guard_source`` as properties, earlier versions call them
    if isinstance(
        inspect.getattr_static(torch._guards.Source, "name"), (property, functools.cached_property)
    ):
        name = property(lambda self: self.text)
        guard_source = property(lambda self: torch._guards.GuardSource.LOCAL)
    else:

        def name(self) -> str:
            return self.text

        def guard_source(self):
            return torch._guards.GuardSource.LOCAL

    @property
    def _name_template(self) -> str:
        return self.text


class OutputGraph:
    """Everything one capture produces: graph, guards, side effects, and the values it depends on."""

    def __init__(
        self,
        f_globals: dict,
        dynamic: bool | Mapping[str, frozenset[int]] = False,
        *,
        scalar_outputs: bool = False,
        shape_env: bool = False,
        static_tensors: frozenset[int] = frozenset(),
    ) -> None:
        self.graph = torch.fx.Graph()
        #: the top-level graph: inputs and attributes always go here (``graph`` is another one
        #: while a control-flow operator's function is traced; see variables/higher_order.py)
        self.root_graph = self.graph
        #: which input dims get symbolic sizes: all (True), none (False), or per input source
        #: (``{"L['x']": {0}}``: the dims that changed size between calls, automatic dynamic)
        self.dynamic = dynamic
        #: ids of argument tensors whose sizes stay static whatever ``dynamic`` says: those that
        #: share a storage with another argument (frame._storage_sharing_arguments says why)
        self.static_tensors = static_tensors
        # no duck sizing: two inputs of equal size get their own symbols, and any equality the
        # graph relies on is a guard the ShapeEnv records (not an assumption)
        #: ``.item()`` / ``.tolist()`` become unbacked symbols of the ShapeEnv (capture_scalar_outputs)
        self.scalar_outputs = scalar_outputs
        #: ``shape_env``: one even with static sizes, for operators whose result sizes are
        #: unbacked symbols (see frame.capture_frame)
        #: without capture_scalar_outputs, a tensor read as a number inside an op (a 0-d tensor
        #: in ``new_zeros``'s size) raises DataDependentOutputException on the fakes, so capture
        #: breaks there, as with static sizes: an unbacked symbol would leave a tensor among the
        #: op's int arguments, which no ATen trace accepts
        self.shape_env = (
            ShapeEnv(duck_shape=False, allow_scalar_outputs=scalar_outputs)
            if dynamic or scalar_outputs or shape_env
            else None
        )
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env)
        self.symbols: dict[sympy.Symbol, tuple] = {}  # symbol -> (input source, dim[, "value"])
        #: symbols of int inputs (any value; the rest are sizes, at least 2)
        self.int_symbols: set[sympy.Symbol] = set()
        # symbols the fake mode gave input strides no size shows (a step slice): (source, dim, "stride")
        self.stride_symbols: dict[sympy.Symbol, tuple] = {}
        self.guards: list[Guard] = []  # deduplicated and ordered by compile_guards
        self.side_effects = SideEffects()
        self.f_globals = f_globals
        self.entry_grad = torch.is_grad_enabled()
        #: autocast blocks open in the graph (variables/ctx.py), and the real exits of blocks
        #: handed in by a graph break that this capture exited (run in Python after the graph)
        self.open_autocasts: list = []
        self.python_autocast_exits: list = []
        self.var_cache: dict[int, VariableTracker] = {}
        self.keepalive: list = []
        self.inputs: list[tuple] = []  # (source, real tensor, node)
        self.tensor_vars: dict[int, TensorVariable] = {}
        self.fake_to_var: dict[int, TensorVariable] = {}
        self.root = torch.nn.Module()
        self._last_placeholder = None
        #: ids of containers from outside held as constants (their mutations must run in Python)
        self.outside_containers: set[int] = set()
        self._names: set[str] = set()
        #: contextlib.contextmanager blocks are traced (generators.py) unless a retry asked not to
        self.trace_contextmanagers = True
        self.traced_contextmanagers = 0

    def shape_guards(self) -> list[Guard]:
        """What the graph assumed about symbolic sizes: each is at least 2 (sizes 0 and 1
        specialize), and every relation the ShapeEnv decided during capture (``s0 == 4`` for a size
        used as a Python int, ``s0 == s1`` for a broadcast, ``s0 > 8`` for a branch)."""
        if self.shape_env is None or not self.symbols:
            return []
        guards: list[Guard] = [
            ShapeGuard(sym >= 2, {sym: self.symbols[sym]})
            for sym in self.symbols
            if sym not in self.int_symbols
        ]
        # a decided equality may have become a replacement (s1 -> s0) instead of a guard: both
        exprs = [g.expr for g in self.shape_env.guards]
        known = {**self.stride_symbols, **self.symbols}
        exprs += [
            sympy.Eq(sym, value)
            for sym, value in self.shape_env.replacements.items()
            if sym in known
        ]
        for expr in exprs:
            if expr is sympy.true:
                continue
            missing = expr.free_symbols - set(known)
            if missing:
                raise Unsupported(f"internal: a shape guard over sizes of no input ({expr})")
            guards.append(ShapeGuard(expr, {sym: known[sym] for sym in expr.free_symbols}))
        return guards

    def alias_guards(self) -> list[Guard]:
        """Which tensor inputs share a storage, as at capture: the compiled graph depends on it
        (aot-partition traces inputs that share a storage and are mutated over one base; inputs
        that do not share one must stay apart, or a write through one would be missed by another)."""
        if len(self.inputs) < 2:
            return []
        tensors = [(s, t) for s, t, _ in self.inputs if isinstance(t, torch.Tensor)]
        if len(tensors) < 2:
            return []
        return [StorageAliasGroups.from_tensors([s for s, _ in tensors], [t for _, t in tensors])]

    # --- values from outside ------------------------------------------------------------------
    def remember(self, value, var):
        self.var_cache[id(value)] = var
        self.keepalive.append(value)
        return var

    def _fresh(self, hint: str) -> str:
        base = re.sub(r"[^0-9a-zA-Z_]", "_", hint).strip("_") or "x"
        if base[0].isdigit():
            base = "_" + base
        name, n = base, 1
        while name in self._names:
            name, n = f"{base}_{n}", n + 1
        self._names.add(name)
        return name

    def _dynamic_dims(self, t: torch.Tensor, source) -> frozenset[int]:
        """The dims of input ``t`` to make symbolic (sizes 0 and 1 always specialize)."""
        if not self.dynamic or source is None or id(t) in self.static_tensors:
            return frozenset()
        dims = set(range(t.dim()) if self._every_dim() else self.dynamic.get(source.expr(), ()))
        # the user's marks: mark_dynamic adds dims, mark_static removes them
        dims = (dims | trace_rules.marked_dynamic_dims(t)) - trace_rules.marked_static_dims(t)
        return frozenset(d for d in dims if d < t.dim() and t.shape[d] >= 2)

    def _every_dim(self) -> bool:
        """``dynamic=True``: every tensor dim and torch.Size item is symbolic."""
        return self.dynamic is True or isinstance(self.dynamic, EveryDim)

    def dynamic_int_dims(self, value: int | torch.Size, source) -> frozenset[int]:
        """Which items of an int (dim 0: the value) or torch.Size argument become symbolic graph
        inputs: those automatic dynamic shapes saw change (``dynamic=None``), every item of a
        torch.Size argument (``dynamic=True``: a size handed over a graph break is a size); 0 and
        1 specialize, as a tensor's sizes do."""
        if not self.dynamic or source is None or self.shape_env is None:
            return frozenset()
        if type(value) is int:  # any value: an int is not a size (TorchDynamo's unspecialized ints)
            return (
                frozenset({0})
                if self.dynamic is not True and 0 in self.dynamic.get(source.expr(), ())
                else frozenset()
            )
        if self._every_dim():
            dims = set(range(len(value)))
        else:
            dims = set(self.dynamic.get(source.expr(), ()))
        return frozenset(d for d in dims if d < len(value) and value[d] >= 2)

    def wrap_input_int(self, value: int, source, *, size: bool) -> SymNodeVariable:
        """An int argument as a graph input of symbolic value (bound in the guards to ``source``);
        ``size``: an item of a torch.Size (at least 2, as a tensor's symbolic sizes), else any int."""
        sym = self.shape_env.create_symbol(
            value,
            _IntInputSource(source.expr()),
            dynamic_dim=DimDynamic.DYNAMIC,
            positive=True if size else None,
            do_not_specialize_zero_one=not size,
        )
        symint = self.shape_env.create_symintnode(sym, hint=value)
        self.symbols[sym] = (source, -1, "value")
        if not size:
            self.int_symbols.add(sym)
        root = self.root_graph
        ctx = (
            root.inserting_after(self._last_placeholder)
            if self._last_placeholder
            else root.inserting_before(None)
        )
        with ctx:
            node = root.placeholder(self._fresh(_name_hint(source)))
        self._last_placeholder = node
        node.meta["example_value"] = symint
        self.inputs.append((source, value, node))
        return SymNodeVariable(node, symint)

    def _fake(self, t: torch.Tensor, dynamic_dims: frozenset[int] = frozenset()) -> torch.Tensor:
        try:
            with warnings.catch_warnings():
                # describing a non-leaf input (an activation handed to a continuation) reads .grad
                warnings.filterwarnings(
                    "ignore", message="The .grad attribute of a Tensor that is not a leaf"
                )
                if self.shape_env is None:
                    return self.fake_mode.from_tensor(t)
                # with a ShapeEnv, from_tensor would make every size symbolic: say which are
                dims = [
                    DimDynamic.DYNAMIC if d in dynamic_dims else DimDynamic.STATIC
                    for d in range(t.dim())
                ]
                return self.fake_mode.from_tensor(
                    t, symbolic_context=StatelessSymbolicContext(dynamic_sizes=dims)
                )
        except Exception as e:  # subclasses / sparse layouts the fake mode cannot describe
            raise Unsupported(f"tensor input of type {type(t).__name__} ({e})") from e

    def wrap_input_tensor(self, tx, t: torch.Tensor, source) -> TensorVariable:
        known = self.tensor_vars.get(id(t))
        if known is not None:
            if source is not None and known.source is not None and known.source != source:
                self.guards.append(SameObjectMatch(known.source, source, True))
            return known
        if source is None:
            return self.wrap_module_tensor(tx, t, source)
        # A parameter reached through a source (an argument, a global, a plain object's attribute;
        # a module's own go through wrap_module_tensor) is an input like any tensor: bound as a
        # constant, the graph kept the first call's parameter (no guard saw another one passed,
        # or the new one an nn.Parameter(...) line makes on each call).
        dynamic_dims = self._dynamic_dims(t, source)
        fake = self._fake(t, dynamic_dims)
        for d in dynamic_dims:
            self.symbols[fake.shape[d].node.expr] = (source, d)
        if dynamic_dims:
            for d, st in enumerate(fake.stride()):
                if (
                    isinstance(st, torch.SymInt)
                    and isinstance(st.node.expr, sympy.Symbol)
                    and st.node.expr not in self.symbols
                ):
                    self.stride_symbols.setdefault(st.node.expr, (source, d, "stride"))
        root = self.root_graph
        ctx = (
            root.inserting_after(self._last_placeholder)
            if self._last_placeholder
            else root.inserting_before(None)
        )
        with ctx:
            node = root.placeholder(self._fresh(_name_hint(source)))
        self._last_placeholder = node
        node.meta["example_value"] = fake
        self.guards.append(TensorMatch.from_tensor(source, t, dynamic_dims))
        var = TensorVariable(node, fake, source, cls=type(t))
        self.inputs.append((source, t, node))
        return self._register(t, var)

    def wrap_module_tensor(self, tx, t: torch.Tensor, source) -> TensorVariable:
        """A parameter, buffer or constant tensor: a get_attr node bound to the very same object."""
        known = self.tensor_vars.get(id(t))
        if known is not None:
            return known
        name = self._fresh(_name_hint(source) if source is not None else "_tensor_constant")
        if isinstance(t, torch.nn.Parameter):
            self.root.register_parameter(name, t)
        else:
            self.root.register_buffer(name, t)
        node = self.root_graph.get_attr(name)
        fake = self._fake(t)
        node.meta["example_value"] = fake
        var = TensorVariable(node, fake, None, cls=type(t))
        var.constant = t
        return self._register(t, var)

    def _register(self, t, var):
        self.tensor_vars[id(t)] = var
        self.fake_to_var[id(var.fake)] = var
        self.keepalive.append(t)
        return var

    # --- graph ops ------------------------------------------------------------------------------
    def call_tensor_op(self, tx, kind: str, target, args: list, kwargs: dict) -> VariableTracker:
        """Add a node ``target(*args, **kwargs)``; its result's metadata comes from running it on fakes."""
        node_args = tuple(_map(a, "node") for a in args)
        node_kwargs = {k: _map(v, "node") for k, v in kwargs.items()}
        if _has_negative_nan((node_args, node_kwargs)):
            # FX writes every NaN as ``nan``: the graph would compute with +NaN
            raise Unsupported(
                "a negative NaN constant in a graph operation (the graph's code "
                "cannot spell its sign)",
                "the operation runs in Python",
            )
        fake_args = [_map(a, "fake") for a in args]
        fake_kwargs = {k: _map(v, "fake") for k, v in kwargs.items()}
        if _is_subtraction(target) and any(
            _is_bool(a) for a in (*fake_args, *fake_kwargs.values())
        ):
            # eager refuses subtraction with a bool operand; meta functions (fakes) do not check
            raise Unsupported(
                "subtraction with a bool operand (eager raises RuntimeError)",
                "it runs in Python, which raises eager's error",
            )
        if inplace_self_overlap(kind, target, fake_args, fake_kwargs):
            # in Python the op does what eager does: raises (most ops) or writes (fill_, ...)
            raise Unsupported(
                "an in-place op writing a tensor whose elements share memory (an expand; "
                "eager raises RuntimeError for most ops)",
                "it runs in Python, as in eager",
            )
        if inplace_partial_overlap(kind, target, fake_args, fake_kwargs):
            # eager's TensorIterator refuses it; functionalization would compute it
            raise Unsupported(
                "an in-place op whose input partially overlaps the tensor it writes "
                "(eager raises RuntimeError)",
                "it runs in Python, which raises eager's error",
            )
        try:
            # with symbolic sizes, composite ops run their Python decompositions (the C++ ones
            # read sizes as plain ints: "Cannot call numel() on tensor with symbolic sizes")
            with (
                self.fake_mode,
                (
                    enable_python_dispatcher()
                    if self.shape_env is not None
                    else contextlib.nullcontext()
                ),
            ):
                if kind == "call_method":
                    result = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
                else:
                    result = target(*fake_args, **fake_kwargs)
        except Unsupported:
            raise
        except Exception as e:
            name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
            raise Unsupported(
                f"{name} on fake tensors raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                "data-dependent or unsupported operation",
            ) from e
        missing = kernel_missing(kind, target, fake_args, fake_kwargs)
        if missing is not None:
            raise Unsupported(
                f"eager refuses these dtypes ({missing})",
                "it runs in Python, which raises eager's error",
            )
        if target is operator.setitem:  # mutates its first argument, returns None
            node = self.graph.create_node(kind, target, node_args, node_kwargs)
            node.meta["example_value"] = None
            return ConstantVariable(None)
        if not _contains_tensor(result):
            return tx.wrap(result, None)
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        node.meta["example_value"] = result
        self.bind_unbacked(node, result)
        return self._wrap_result(node, result)

    def bind_unbacked(self, node, value) -> None:
        """Say which node introduced the unbacked symbols computing ``value`` on fakes created
        (``node.meta["unbacked_bindings"]``, as TorchDynamo records them). The ShapeEnv keeps a
        fresh unbacked symbol pending until some node binds it, and the next tracer over these
        fakes (aot-partition's make_fx, under dynamic shapes) refuses its first tensor while one
        is pending: a cond whose branches differ in size failed so."""
        env = self.shape_env
        if env is None or not env.pending_fresh_unbacked_symbols:
            return
        bindings = compute_unbacked_bindings(env, value, peek=True)
        if bindings:
            node.meta["unbacked_bindings"] = bindings
            env.pending_fresh_unbacked_symbols[:] = [
                s for s in env.pending_fresh_unbacked_symbols if s not in bindings
            ]

    def _wrap_result(self, node, result):
        if isinstance(result, torch.Tensor):
            known = self.fake_to_var.get(id(result))
            if known is not None:
                return known
            var = TensorVariable(node, result)
            self.fake_to_var[id(result)] = var
            self.keepalive.append(result)  # ids in fake_to_var must not be reused
            return var
        if isinstance(result, (tuple, list)):
            items = []
            for i, r in enumerate(result):
                if isinstance(r, torch.Tensor):
                    sub = self.graph.call_function(operator.getitem, (node, i))
                    sub.meta["example_value"] = r
                    items.append(self._wrap_result(sub, r))
                else:
                    items.append(ConstantVariable(r))
            if isinstance(result, list):
                return ListVariable(items)
            return TupleVariable(items, cls=type(result) if type(result) is not tuple else tuple)
        raise Unsupported(f"op result of type {type(result).__name__}")

    def _scalar_as_tensor(self, v: SymNodeVariable) -> TensorVariable:
        """An unbacked value handed back to Python leaves the graph as a 0-d tensor (graph
        outputs are tensors, contract C1); the run function reads it back with ``.item()``.
        Floats go through float64, the precision of a Python float."""
        dtype = {torch.SymInt: torch.int64, torch.SymBool: torch.bool}.get(
            type(v.value), torch.float64
        )
        with self.fake_mode:
            fake = torch.scalar_tensor(v.value, dtype=dtype)
        node = self.graph.call_function(torch.scalar_tensor, (v.node,), {"dtype": dtype})
        node.meta["example_value"] = fake
        return self._wrap_result(node, fake)

    # --- finishing ------------------------------------------------------------------------------
    def op_count(self) -> int:
        """Operations worth a graph: global-state switches alone (grad mode, autocast) are not."""
        return sum(
            1
            for n in self.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")
            and n.target not in _STATE_OPS
            and not _scalar_arithmetic(n)
        )

    def compile(self, backend, signature, cells: dict, *, ret=None, finish=None):
        """Finish the graph, hand it to ``backend`` and generate ``run(<user params>)``.

        ``run`` calls the compiled graph, replays the side effects, then returns ``ret`` rebuilt, or
        (at a graph break) runs what ``finish(reconstructor)`` emits.
        """
        ns = Namespace()
        ns.values.update({"_G": self.f_globals, "_cells": cells})
        for block in reversed(self.open_autocasts):  # open at a break: the graph exits them itself
            node = self.graph.call_function(_exit_autocast_fn(), (block.node,))
            node.meta["example_value"] = None
        rec = Reconstructor(ns, self.symbols, as_tensor=self._scalar_as_tensor)
        for kind, target, key, value in self.side_effects.entries:
            if kind == "container":
                dst = source_code(target.source, ns)
                if isinstance(target, ListVariable):
                    rec.emit(f"{dst}[:] = {rec.contents(target)}")
                else:
                    # the new contents first: they may read the old ones (``d['a']``)
                    rec.emit(
                        f"__n = {rec.contents(target)}; __t = {dst}; __t.clear(); __t.update(__n)"
                    )
            elif kind == "attr":
                dst = (
                    source_code(target.source, ns)
                    if target.source is not None
                    else ns.ref(target.value)
                )
                if isinstance(value, DeletedVariable):
                    rec.emit(f"__t = {dst}")
                    rec.emit(f"if hasattr(__t, {key!r}): delattr(__t, {key!r})")
                else:
                    # a class's own __setattr__ ran symbolically already (objects.py's
                    # inline_user_setattr): the replay is the store it ended in, not a second run
                    store = (
                        ns.ref(object.__setattr__, "raw_setattr")
                        if python_override(type(target.value), "__setattr__")
                        else "setattr"
                    )
                    rec.emit(f"{store}({dst}, {key!r}, {rec.expr(value)})")
            elif kind == "cell":
                rec.emit(f"{rec.expr(target)}.cell_contents = {rec.expr(value)}")
            elif kind == "global":
                rec.emit(f"{ns.ref(target)}[{key!r}] = {rec.expr(value)}")
            elif kind == "call":
                rec.emit(f"{ns.ref(target, 'log')}(*{ns.ref(key, 'a')}, **{ns.ref(value, 'k')})")
        # the grad mode the code after the graph expects (a graph's own switches may be gone
        # after aot-partition, and a graph of switches alone is not compiled)
        grad = torch.is_grad_enabled()
        if grad != self.entry_grad or any(
            n.target is torch._C._set_grad_enabled for n in self.graph.nodes
        ):
            rec.emit(f"{ns.ref(torch._C._set_grad_enabled, 'set_grad')}({grad})")
        # autocast blocks as the code after the graph expects them: those handed in and exited
        # here are exited in Python, those entered here and open at the break entered in Python
        for exit_ in self.python_autocast_exits:
            rec.emit(f"{ns.ref(exit_, 'autocast_exit')}()")
        for block in self.open_autocasts:
            if block.handed_in is None:
                rec.emit(
                    f"{ns.ref(_enter_autocast_fn(), 'enter_autocast')}(*{ns.ref(block.args, 'autocast_args')})"
                )
        if finish is None:
            rec.emit(f"return {rec.expr(ret)}")
        else:
            finish(rec)

        self.graph.output(tuple(v.node for v in rec.outputs))
        compiled, gm = None, None
        example_inputs = [t for _, t, _ in self.inputs]
        if self.op_count() > 0:
            self.graph.lint()
            gm = torch.fx.GraphModule(self.root, self.graph)
            compiled = backend(gm, list(example_inputs))
        params, _ = signature_text(signature, ns)
        lines = [f"def run({params}):"]
        lines += [f"    {name} = {code}" for code, name in rec.entry_reads.items()]
        if compiled is not None:
            ns.values["_compiled"] = compiled
            lines.append(
                "    __o = _compiled("
                + ", ".join(source_code(s, ns) for s, _, _ in self.inputs)
                + ")"
            )
        elif rec.outputs:
            raise Unsupported("internal: graph outputs without a graph")
        lines += [f"    {line}" for line in rec.body]
        src = "\n".join(lines) + "\n"
        return ns, ns.exec(src, "run"), src, gm


def _exit_autocast_fn():
    from torch.amp.autocast_mode import _exit_autocast

    return _exit_autocast


def _enter_autocast_fn():
    from torch.amp.autocast_mode import _enter_autocast

    return _enter_autocast


def _state_ops() -> frozenset:
    from torch.amp.autocast_mode import _enter_autocast, _exit_autocast

    return frozenset({torch._C._set_grad_enabled, _enter_autocast, _exit_autocast})


_STATE_OPS = _state_ops()


def _scalar_arithmetic(n: torch.fx.Node) -> bool:
    """Arithmetic on symbolic ints alone (``i % 2`` of an int input): its value is rebuilt from
    the inputs where Python needs it, so it is not worth a graph of its own."""

    def scalar(v) -> bool:
        return isinstance(v, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool))

    return (
        n.op == "call_function"
        and getattr(n.target, "__module__", None) in ("_operator", "operator", "math")
        and scalar(n.meta.get("example_value"))
        and all(scalar(a.meta.get("example_value")) for a in n.all_input_nodes)
    )


def _name_hint(source) -> str:
    """``L['x'].w`` -> ``x.w`` (sanitised by ``_fresh``): graph names read like the user's code."""
    return re.sub(r"\b[LGC]\['([^']*)'\]", r"\1", source.expr())
