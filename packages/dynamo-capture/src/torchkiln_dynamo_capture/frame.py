"""Capturing one frame: symbolic evaluation, and the split into graph + step + resume at a break.

``capture_frame`` runs the translator over one call. When it fails at a break point of the top
frame (and fullgraph was not asked), capture restarts and stops right before that instruction: the
graph of everything before is compiled, and ``run`` ends by calling the *step* function with the
live stack and locals. The step runs the instruction in CPython and calls ``resume_at_N``, which is
itself a captured function (see bytecode/resume.py).
"""

from __future__ import annotations

import functools
import inspect
import os
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torchkiln_guards import CompiledGuards, compile_guards

from . import trace_rules
from ._guards import batch_guards
from ._logging import log_graph_break
from ._sources import AttrSource, ClosureSource, HeldObjectSource, LocalSource
from .breaks import ITER, NULL, VALUE, graph_break, handler_layouts, successor_layouts
from .bytecode import decode
from .bytecode.closures import is_comprehension
from .bytecode.except_flow import handled_slot
from .bytecode.liveness import live_in
from .bytecode.resume import (
    Successor,
    parameter_name,
    resume_code,
    set_handled,
    stack_args,
    step_code,
)
from .exc import Unsupported
from .output import OutputGraph
from .translator import InstructionTranslator, StopCapture, grad_mode_guard
from .variables.base import ConstantVariable, NullVariable
from .variables.containers import IteratorVariable, TupleVariable
from .variables.ctx import autocast_state, restore_autocast_state
from .variables.functions import (
    NewCellVariable,
    PartialVariable,
    RealCellVariable,
    UserFunctionVariable,
)
from .variables.modules import NewModuleVariable, NNModuleVariable
from .variables.objects import UserObjectVariable

if TYPE_CHECKING:  # wrapper.py imports this module
    from .wrapper import CaptureContext


@dataclass
class CacheEntry:
    """One captured specialisation: ``check`` its guards, ``run`` the transformed code."""

    check: Callable[..., bool]
    run: Callable[..., Any]
    guards: CompiledGuards
    graph_module: torch.fx.GraphModule | None
    run_source: str
    op_count: int


def _own_code(code: types.CodeType) -> bool:
    """Whether ``code`` is capture's own (the module wrapper's ``_call_module``, whose one line
    calls the module): a break there is in the user's callee, which is then captured as its own
    frame and records the break where it is. The wrapper's frame holds nothing before or after
    the call, so it splits no graph: its record names capture's file and is dropped once the
    callee records the same cause (``record_break``)."""
    return code.co_filename.startswith(_PACKAGE_DIR)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _storage_sharing_arguments(args, kwargs) -> frozenset[int]:
    """ids of the tensor arguments that share a storage with another, distinct tensor argument
    (``f(x, x[0])``, two slices of one buffer, the views a graph break hands to its continuation).

    Their sizes stay static under dynamic shapes: when such inputs are mutated, aot-partition
    traces them over one synthetic base rebuilt with ``as_strided`` from their geometry, which must
    be static (TensorMatch then pins their sizes, strides and storage offsets). Symbolic geometry
    would need the base's extent as an expression over several inputs' sizes and strides; a
    specialization per size of just these inputs is simpler and exact (the other inputs stay
    symbolic)."""
    by_storage: dict[int, set[int]] = {}
    held = []  # keeps the tensors alive while their ids are compared
    for value in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(value, torch.Tensor) and value.layout is torch.strided:
            try:
                key = value.untyped_storage()._cdata
            except (RuntimeError, NotImplementedError):  # no storage (a subclass): shares none
                continue
            held.append(value)
            by_storage.setdefault(key, set()).add(id(value))
    return frozenset(i for ids in by_storage.values() if len(ids) > 1 for i in ids)


def code_signature(fn) -> inspect.Signature:
    """The signature of ``fn``'s code: the parameters its frame really binds. Not
    ``inspect.signature(fn)``, which follows ``__wrapped__`` (``functools.wraps``) and a
    ``__signature__`` set on the function: the ``kernels`` package's ``Func.forward(self, *args,
    **kwargs)`` shows its kernel's parameters (``q, k, cos, sin``), and binding those left its
    frame without ``args``. A bound method's signature leaves ``self`` out, as Python binds it."""
    func = fn.__func__ if isinstance(fn, types.MethodType) else fn
    plain = types.FunctionType(
        func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    plain.__kwdefaults__ = func.__kwdefaults__
    if isinstance(fn, types.MethodType):
        return inspect.signature(types.MethodType(plain, fn.__self__))
    return inspect.signature(plain)


def _start(fn, args, kwargs, codes, dynamic=False, scalar_outputs=False, shape_env=False):
    """A fresh OutputGraph and top-frame translator with the call's arguments bound (``codes``: the
    capture context's ``CodeRegistry``, which says which arguments of generated code are cells)."""
    bound_self = None
    if isinstance(fn, types.MethodType):
        bound_self, func = fn.__self__, fn.__func__
    else:
        func = fn
    if not isinstance(func, types.FunctionType):
        raise Unsupported(
            f"capturing {type(fn).__name__} objects", "pass a Python function, method or nn.Module"
        )
    code = func.__code__
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
        raise Unsupported("capturing a generator or coroutine function")
    sig = code_signature(fn)
    out = OutputGraph(
        func.__globals__,
        dynamic,
        scalar_outputs=scalar_outputs,
        shape_env=shape_env,
        static_tensors=_storage_sharing_arguments(args, kwargs) if dynamic else frozenset(),
    )
    grad_mode_guard(out)
    tx = InstructionTranslator(out, code, func.__globals__, {}, {})
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
    localvars = {}
    cells: dict[str, RealCellVariable | NewCellVariable] = {}
    self_in_varargs = None
    if bound_self is not None:
        self_src = HeldObjectSource(bound_self, f"{func.__qualname__}.__self__")
        self_var = tx.wrap(bound_self, self_src)
        if code.co_argcount == 0 and code.co_flags & inspect.CO_VARARGS:
            # ``def wrapped(*args, **kwargs)`` bound as a method (decorators such as transformers'
            # deprecate_kwarg): CPython passes self as args[0], the bound signature leaves it out
            self_in_varargs = code.co_varnames[code.co_kwonlyargcount]
        else:
            localvars[code.co_varnames[0]] = self_var
    # a continuation receives its frame's cell variables as the cells themselves (see
    # bytecode/resume.py): stores go to the caller's cell, reached through the argument
    passed_cells = codes.passed_cells(code)
    for name, value in ba.arguments.items():
        if name in passed_cells:
            cells[name] = RealCellVariable(
                value, AttrSource(LocalSource(name), "cell_contents"), LocalSource(name)
            )
        elif name == self_in_varargs:
            rest = tx.wrap(value, LocalSource(name))
            localvars[name] = TupleVariable([self_var, *rest.items])
        else:
            localvars[name] = tx.wrap(value, LocalSource(name))
    real_cells = {}
    for name in code.co_cellvars:
        if name not in cells:
            cells[name] = NewCellVariable(localvars.pop(name, None))
    for name, cell in zip(code.co_freevars, func.__closure__ or ()):
        real_cells[name] = cell
        cells[name] = RealCellVariable(cell, ClosureSource(name))
    tx.locals, tx.cells = localvars, cells
    return func, sig, out, tx, real_cells


def capture_frame(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    ctx: CaptureContext,
    dynamic: bool | dict[str, frozenset[int]] = False,
) -> CacheEntry:
    """Symbolically evaluate one call of ``fn`` and build its cache entry (raises Unsupported).
    ``dynamic``: which input dims get symbolic sizes (see OutputGraph)."""
    recorded = len(ctx.breaks)
    options = {"trace_contextmanagers": True, "shape_env": False}
    while True:
        try:
            return _capture_once(fn, args, kwargs, ctx, dynamic, **options)
        except Unsupported as e:
            retry = _retry_options(e, ctx, options)
            if retry is None:
                raise
            del ctx.breaks[recorded:], ctx.break_errors[recorded:]
            options = retry


def _retry_options(e: Unsupported, ctx, options: dict) -> dict | None:
    """How to capture again after ``e``, or None: raise it."""
    if getattr(e, "needs_shape_env", False) and not options["shape_env"]:
        # an operator whose result has sizes known only at run time (a cond whose branches
        # differ in size) needs unbacked symbols, so a ShapeEnv, which a static capture lacks
        # (TorchDynamo always has one): capture again with one, sizes still static
        return {**options, "shape_env": True}
    if (
        not ctx.fullgraph
        and getattr(e, "traced_contextmanager", False)
        and options["trace_contextmanagers"]
    ):
        # a break inside a traced contextmanager block cannot be handed to CPython (its generator
        # exists only symbolically): capture again with contextmanager calls run in Python
        return {**options, "trace_contextmanagers": False}
    return None


def _capture_once(
    fn, args, kwargs, ctx, dynamic, *, trace_contextmanagers: bool, shape_env: bool
) -> CacheEntry:
    grad = torch.is_grad_enabled()
    autocast = autocast_state()  # tracing a block enters and exits it for real
    out = None
    try:
        func, sig, out, tx, real_cells = _start(
            fn, args, kwargs, ctx.codes, dynamic, ctx.capture_scalar_outputs, shape_env
        )
        out.trace_contextmanagers = trace_contextmanagers
        try:
            ret = tx.run()
            _, run, run_src, gm = out.compile(ctx.compile_graph, sig, real_cells, ret=ret)
        except Unsupported as e:
            bp = e.break_point
            if (
                ctx.fullgraph
                or bp is None
                or getattr(e, "needs_shape_env", False)
                and not shape_env
            ):
                raise
            torch._C._set_grad_enabled(grad)
            restore_autocast_state(autocast)
            func, sig, out, tx, real_cells = _start(
                fn, args, kwargs, ctx.codes, dynamic, ctx.capture_scalar_outputs, shape_env
            )
            out.trace_contextmanagers = trace_contextmanagers
            tx.stop_at = (bp.first, bp.occurrence)
            try:
                tx.run()
            except StopCapture:
                pass
            else:
                raise Unsupported("internal: capture did not reach its break point again") from e
            run, run_src, gm = _split(func, sig, out, tx, e, ctx, real_cells)
    except Unsupported as e:
        e.traced_contextmanager = out is not None and out.traced_contextmanagers > 0
        raise
    finally:
        torch._C._set_grad_enabled(grad)
        restore_autocast_state(autocast)
    out.guards.extend(out.shape_guards())
    out.guards.extend(out.alias_guards())
    compiled_guards = compile_guards(
        batch_guards(out.guards), signature=sig, f_globals=func.__globals__, closure=real_cells
    )
    return CacheEntry(
        compiled_guards.check,
        run,
        compiled_guards,
        gm,
        run_src,
        out.op_count() if gm is not None else 0,
    )


def _layout(stack) -> tuple[str, ...]:
    return tuple(
        NULL if isinstance(v, NullVariable) else ITER if isinstance(v, IteratorVariable) else VALUE
        for v in stack
    )


def _live(code: types.CodeType, index: int, bound: set) -> tuple[str, ...]:
    """Live locals at ``index``, and every cell variable (closures may read a cell later, which
    liveness cannot see; cells are passed as cells, bound or not)."""
    names = set(live_in(code)[index] & bound) | set(code.co_cellvars)
    if "__class__" in code.co_freevars and code.co_argcount and code.co_varnames[0] in bound:
        names.add(code.co_varnames[0])  # zero-argument super() reads the first argument implicitly
    order = {n: i for i, n in enumerate(code.co_varnames + code.co_cellvars)}
    return tuple(sorted(names, key=lambda n: order.get(n, len(order))))


def _split(func, sig, out, tx, err: Unsupported, ctx, real_cells):
    """Compile the graph up to the break point and a ``run`` ending in ``return step(...)``."""
    bp = err.break_point
    assert bp is not None  # _capture_once splits only at a break point
    code = func.__code__
    insts = decode(code)
    orig, first = ctx.codes.original(code, bp.first)
    _, last = ctx.codes.original(code, bp.last)
    if first is None or last is None:
        raise Unsupported("internal: a graph break inside a continuation's prologue") from err
    layout = _layout(tx.stack)
    # names are the original frame's (liveness is its): a continuation holds a local Python
    # refuses as a parameter's under its parameter_name
    renamed = {parameter_name(n): n for n in orig.co_varnames}
    bound = {renamed.get(n, n) for n in tx.locals} - set(code.co_freevars)
    successors = []
    for jump, index, succ_layout in successor_layouts(insts, bp, layout):
        _, orig_index = ctx.codes.original(code, index)
        if orig_index is None:
            raise Unsupported("internal: a continuation target inside a prologue") from err
        live = _live(orig, orig_index, bound)
        resume = ctx.resume_function(orig, orig_index, succ_layout, live, func)
        successors.append(Successor(jump, resume, succ_layout, live))
    # the instruction may raise into an except clause of this frame: the clause body and what
    # follows are a continuation too
    for clause, succ_layout in handler_layouts(orig, last, layout):
        live = _live(orig, clause.body, bound | set(clause.binds))
        resume = ctx.resume_function(orig, clause.body, succ_layout, live, func)
        successors.append(Successor(False, resume, succ_layout, live, handler=clause.body))
    live_first = _live(orig, first, bound)
    step = ctx.step_function(orig, first, last, layout, live_first, successors, func, bp.getter)
    # a continuation that started in an except clause body and has left it since: the exception
    # handled before it is the one being handled again when the step runs (its POP_EXCEPT was a POP_TOP)
    started = ctx.codes.resume_target(code)
    handled = handled_slot(orig, started, first) if started is not None else None

    where_line = insts[bp.last].lineno
    if err.in_callee:
        reason = f"call to a function that breaks: {err.construct}"
        hint = "the callee is captured as its own frame"
    else:
        reason, hint = err.construct, err.hint
    record = graph_break(reason, code.co_filename, where_line, hint)
    ctx.record_break(record, err, own=err.in_callee and _own_code(code))
    log_graph_break(
        f"Graph break in {code.co_qualname} ({record.filename}:{record.lineno}): {reason}"
        + (f" (hint: {hint})" if hint else "")
        + (f"\n    {record.source_line}" if record.source_line else "")
    )

    callee_slot = _callee_slot(insts[bp.last], layout) if err.in_callee else None

    def finish(rec):
        ns = rec.ns
        args = [
            rec.expr(
                tx.cells[name]
                if name in code.co_cellvars
                else tx.locals[name if name in tx.locals else parameter_name(name)]
            )
            for name in live_first
        ]
        for i, (kind, v) in enumerate(zip(layout, tx.stack)):
            if kind == NULL:
                continue
            if kind == ITER:
                args.append(rec.iter_items(v))
            elif i == callee_slot:
                args.append(_callee_expr(rec, ctx, v))
            else:
                args.append(rec.expr(v))
        if handled is not None:
            rec.emit(
                f"{ns.ref(set_handled, 'set_handled')}({rec.expr(tx.locals[f'__tk_stack{handled}'])})"
            )
        rec.emit(f"return {ns.ref(step, 'step')}({', '.join(args)})")

    _, run, run_src, gm = out.compile(ctx.compile_graph, sig, real_cells, finish=finish)
    assert len(stack_args(layout)) + len(live_first) == step.__code__.co_argcount
    return run, run_src, gm


def _callee_slot(inst, layout) -> int | None:
    """The stack slot holding the callable of the failing call (None: not a call)."""
    depth = len(layout)
    if inst.opname == "CALL":
        below = depth - inst.arg - 2
        return below + 1 if layout[below] == NULL else below
    if inst.opname == "CALL_FUNCTION_EX":
        return depth - 2 - (inst.arg & 1)
    return None


_COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")


def _callee_expr(rec, ctx, v) -> str:
    """The callable a break at a call hands to CPython: captured itself where capture can."""
    ns = rec.ns
    cref = ns.ref(ctx, "ctx")
    if isinstance(v, NNModuleVariable):
        return f"{cref}.module_callee({rec.expr(v)})"
    if isinstance(v, UserFunctionVariable) and v.fn is not None and trace_rules.is_disabled(v.fn):
        return rec.expr(v)  # marked disable: called as it is, never captured
    if (
        isinstance(v, UserFunctionVariable)
        and v.fn is not None
        and isinstance(v.self_var, NewModuleVariable)
    ):
        # a method of a module made inside the function (``register_forward_hook`` on it): a new
        # object on every call, so a frame captured per (method, object) would compile on every
        # call and keep each module alive; it runs in Python
        return rec.expr(v)
    if isinstance(v, UserFunctionVariable) and v.fn is not None and not v.by_code:
        if v.self_var is None:
            return ns.ref(ctx.function_callee(v.fn), "callee")
        return f"{cref}.method_callee({ns.ref(v.fn)}, {rec.expr(v.self_var)})"
    if (
        isinstance(v, UserFunctionVariable)
        and v.self_var is None
        and v.code.co_name in _COMPREHENSIONS
    ):
        # a 3.11 comprehension, called with an iterator capture cannot see into: captured per code
        # object over the iterator's items where they can be taken ahead; generator expressions
        # run in Python
        if is_comprehension(v.code):
            return f"{cref}.comprehension_callee({rec.expr(v)})"
        return rec.expr(v)
    if isinstance(v, UserFunctionVariable) and v.self_var is None:
        # a function made during capture: captured per code object (each run makes a new
        # function object and new cells for the same code)
        return f"{cref}.made_callee({rec.expr(v)})"
    if (
        isinstance(v, PartialVariable)
        and isinstance(v.func, UserFunctionVariable)
        and v.func.fn is not None
        and not v.func.by_code
        and v.func.self_var is None
    ):
        args = "".join(rec.expr(a) + ", " for a in v.args)
        kwargs = "".join(f"{k}={rec.expr(a)}, " for k, a in v.kwargs.items())
        return f"{ns.ref(functools.partial, 'partial')}({ns.ref(ctx.function_callee(v.func.fn), 'callee')}, {args}{kwargs})"
    if isinstance(v, ConstantVariable) and isinstance(v.value, type):
        plain = ctx.constructor_callee(v.value)
        if plain is not None:
            return ns.ref(plain, "construct")
    if isinstance(v, UserObjectVariable):
        # an object with a Python __call__: the method captured per instance, like a module's forward
        call = inspect.getattr_static(type(v.value), "__call__", None)
        if isinstance(call, types.FunctionType):
            return f"{cref}.method_callee({ns.ref(call)}, {rec.expr(v)})"
    return rec.expr(v)


def make_function(code: types.CodeType, func: types.FunctionType) -> types.FunctionType:
    """A function running ``code`` with ``func``'s globals and closure."""
    closure = func.__closure__ if code.co_freevars else None
    if closure is not None and len(closure) != len(code.co_freevars):
        raise Unsupported("internal: a continuation's free variables differ from its function's")
    return types.FunctionType(code, func.__globals__, code.co_name, None, closure)


__all__ = ["CacheEntry", "capture_frame", "make_function", "resume_code", "step_code"]
