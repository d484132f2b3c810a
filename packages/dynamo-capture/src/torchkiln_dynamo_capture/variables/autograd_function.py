"""``MyFunction.apply(*args)`` of a ``torch.autograd.Function``, in the graph.

When grad mode is off, or no tensor argument requires grad, eager's ``apply`` runs
``forward(ctx, *args)`` under ``no_grad`` (new-style Functions: ``forward(*args)`` then
``setup_context(ctx, inputs, output)``) and returns its result: nothing is recorded for a
backward, and ctx is dropped. Capture does the same: it inlines ``forward`` (and
``setup_context``) with grad mode off, on a ctx of its own (``InferenceCtx``) whose calls record
nothing, so an inference model with a custom Function (BLOOM's GeLU) stays one graph.

Where a gradient may flow, the user's ``backward`` decides it. ``apply`` then becomes one node
of the graph (``apply_in_graph``), a function that calls ``cls.apply`` (``function_node``): run
by the graph it records the user's backward as eager does, and aot-partition's joint trace runs
``forward`` and, for the gradients, the user's ``backward`` on its tracing tensors, so both are
compiled in the forward and backward graphs. It takes that form only when capture can vouch for
both functions:

- ``forward`` is traced first into a graph of its own (``higher_order._trace``, then dropped),
  on a ctx that notes what it is asked (``SpeculationCtx``): it must trace with no effect
  outside it and must not ``mark_dirty`` an input (an in-place Function) nor save for forward
  mode. That trace also guards whatever ``forward`` reads, as inlining would;
- ``backward`` is never traced by capture: it (and a ``once_differentiable`` wrapper's
  function, and the functions they read) may read only globals and closure cells bound to
  modules, functions, builtins or classes, and globals bound to numbers, strings or None (a
  module-level ``float`` clip: recurrent Gemma's ``_MAX_SQRT_GRADIENT``), whose values capture
  guards since the joint trace bakes them into the backward graph; never a value that could
  change unseen (a list, a tensor). Rebinding such a number between a forward and its backward
  (eager's backward reads the new one) is not followed;
- the arguments are tensors and plain constants, or tuples and dicts of constants (YOSO's
  ``config``, guarded item by item as any constant capture reads), passed by position.

Otherwise ``apply`` is inlined as written and breaks at ``torch._C._FunctionBase.apply``, which
then runs in Python between two graphs, as before. The inputs' ``requires_grad`` is guarded, so
the choice is made again when it changes. A graph holding such a node is not kept in the
persistent graph cache: the node's target is not torch's, and its code is not in the graph's
text (``torchkiln.graph_cache``).
"""

from __future__ import annotations

import dis
import functools
import types
from typing import Any

import torch

from .._sources import module_global_source
from ..exc import Unsupported
from . import higher_order
from .base import ConstantVariable, VariableTracker
from .containers import TupleVariable
from .ctx import _set_grad
from .objects import NewObjectVariable
from .tensors import TensorVariable

#: ``torch.autograd.Function.apply`` as a plain function (a classmethod's ``__func__``)
APPLY = torch.autograd.Function.apply.__func__


class InferenceCtx:
    """The ctx ``forward`` gets when nothing is recorded: its calls do nothing (eager's ctx
    keeps what they say for a backward that never runs). Attributes set on it stay on it."""

    needs_input_grad: tuple[bool, ...] = ()
    materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        pass

    def save_for_forward(self, *tensors: Any) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        pass


class SpeculationCtx(InferenceCtx):
    """The ctx of ``forward``'s trial trace in ``apply_in_graph``: it notes the calls that rule
    the graph form out (capture inlines these methods, so the notes are attributes it sees)."""

    dirty = False

    def mark_dirty(self, *tensors: Any) -> None:
        self.dirty = True

    def save_for_forward(self, *tensors: Any) -> None:
        self.dirty = True


#: what a global or closure cell of ``backward`` may hold: nothing a later call sees changed
#: (modules, functions, builtins and classes)
_FIXED = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)
#: a global ``backward`` may read as a number or other constant: the joint trace bakes its value
#: into the backward graph, so capture guards it (rebinding it compiles again)
_CONSTANT = (bool, int, float, complex, str, bytes, type(None))


def _fixed_reads(fn: Any, seen: set[int] | None = None, constants: list | None = None) -> bool:
    """Whether nothing ``fn`` reads from outside could change between calls unseen: each global
    it loads and each closure cell it holds (``once_differentiable``'s wrapped function) is one
    of ``_FIXED``, and the functions found so are checked alike; a global holding a constant
    (``_CONSTANT``: recurrent Gemma's ``_MAX_SQRT_GRADIENT``) is appended to ``constants`` as
    ``(globals, name)``, for the caller to guard (None: not allowed)."""
    seen = set() if seen is None else seen
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or id(code) in seen:
        return code is not None
    seen.add(id(code))
    values = [cell.cell_contents for cell in fn.__closure__ or ()]
    codes = [code]
    while codes:
        c = codes.pop()
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
        for ins in dis.get_instructions(c):
            if ins.opname != "LOAD_GLOBAL" or ins.argval not in fn.__globals__:
                continue  # else a builtin
            value = fn.__globals__[ins.argval]
            if constants is not None and type(value) in _CONSTANT:
                constants.append((fn.__globals__, ins.argval))
            else:
                values.append(value)
    return all(
        isinstance(v, _FIXED)
        and (not isinstance(v, types.FunctionType) or _fixed_reads(v, seen, constants))
        for v in values
    )


@functools.cache
def function_node(cls: type) -> Any:
    """The graph's target for ``cls.apply``: a function of its own per class, named after it
    (FX binds it as a global of the graph's code)."""

    def apply(*args: Any) -> Any:
        return cls.apply(*args)

    name = "".join(ch if ch.isalnum() else "_" for ch in f"{cls.__module__}_{cls.__qualname__}")
    apply.__name__ = apply.__qualname__ = f"autograd_function_{name}"
    apply.__module__ = __name__
    return apply


_PLAIN = (bool, int, float, type(None), str, torch.dtype, torch.device)


def _plain(value: Any) -> bool:
    """Whether ``value`` may be an argument of the graph's ``apply`` node: a plain constant, or a
    tuple or dict of them (YOSO's ``config``, a dict of numbers, which its backward reads off
    ctx)."""
    if type(value) is tuple:
        return all(_plain(v) for v in value)
    if type(value) is dict:
        return all(type(k) in (str, int) and _plain(v) for k, v in value.items())
    return isinstance(value, _PLAIN)


def apply_in_graph(
    tx, cls_var: VariableTracker, args: list, kwargs: dict
) -> VariableTracker | None:
    """``cls.apply(*args)`` as one graph node where a gradient may flow (see the module
    docstring for when); None when capture cannot vouch for it (the caller inlines ``apply``,
    which breaks the graph)."""
    cls = cls_var.real_value()
    if kwargs or not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        return None
    for a in args:
        if isinstance(a, TensorVariable):
            continue
        if not (a.is_python_constant() and _plain(a.as_python_constant())):
            return None
    constants: list = []
    if not _fixed_reads(cls.backward, constants=constants):
        return None
    new_style = _overrides_setup_context(cls)
    ctx = NewObjectVariable(SpeculationCtx)
    forward = tx.getattr(cls_var, "forward")
    prev = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)  # eager runs forward under no_grad
    try:
        higher_order._trace(
            tx,
            forward,
            list(args),
            "autograd_function_forward",
            call_as=None if new_style else (lambda params, _: [ctx, *params]),
        )
    except Unsupported:
        return None
    finally:
        torch._C._set_grad_enabled(prev)
    dirty = ctx.attrs.get("dirty")
    if dirty is not None and dirty.is_python_constant() and dirty.as_python_constant():
        return None
    try:
        node = tx.out.call_tensor_op(tx, "call_function", function_node(cls), list(args), {})
    except Unsupported:
        return None
    for f_globals, name in {(id(g), n): (g, n) for g, n in constants}.values():
        # wrapping the global with its source guards its value (builder.wrap: ConstantMatch)
        tx.wrap(f_globals[name], module_global_source(f_globals, name))
    return node


def _records_gradient(args: list, kwargs: dict) -> bool:
    """Whether eager's ``apply`` would record a backward: grad mode on and some tensor argument
    (autograd looks at the direct arguments only) requiring grad."""
    if not torch.is_grad_enabled():
        return False
    values = [*args, *kwargs.values()]
    return any(isinstance(v, TensorVariable) and v.fake.requires_grad for v in values)


def _overrides_setup_context(cls: type) -> bool:
    base = torch.autograd.function._SingleLevelFunction.setup_context
    return getattr(cls.setup_context, "__func__", cls.setup_context) is not getattr(
        base, "__func__", base
    )


def call_apply(tx, cls_var: VariableTracker, args: list, kwargs: dict) -> VariableTracker | None:
    """``cls.apply(*args, **kwargs)``: inlined as eager runs it when nothing is recorded, one
    graph node where a gradient may flow (``apply_in_graph``); None when the class is not a
    plain Function subclass or capture cannot vouch for the node (the caller then inlines
    ``apply`` itself, which breaks the graph)."""
    cls = cls_var.real_value()
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        return None
    if _records_gradient(args, kwargs):
        return apply_in_graph(tx, cls_var, args, kwargs)
    new_style = _overrides_setup_context(cls)
    if new_style and kwargs:
        return None  # apply binds them to forward's defaults first: not modelled
    ctx = NewObjectVariable(InferenceCtx)
    ctx.attrs["needs_input_grad"] = TupleVariable([ConstantVariable(False) for _ in args])
    forward = tx.getattr(cls_var, "forward")
    prev = torch.is_grad_enabled()
    _set_grad(tx, False)  # eager runs forward (and setup_context) under no_grad
    try:
        if new_style:
            output = tx.call_function(forward, list(args), {})
            setup = tx.getattr(cls_var, "setup_context")
            tx.call_function(setup, [ctx, TupleVariable(list(args)), output], {})
        else:
            output = tx.call_function(forward, [ctx, *args], dict(kwargs))
    except BaseException:
        torch._C._set_grad_enabled(prev)  # the frame is split before this call: no node
        raise
    _set_grad(tx, prev)
    return output
