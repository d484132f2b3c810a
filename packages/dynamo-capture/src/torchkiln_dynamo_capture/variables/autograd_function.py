"""``MyFunction.apply(*args)`` of a ``torch.autograd.Function`` where no gradient is recorded.

When grad mode is off, or no tensor argument requires grad, eager's ``apply`` runs
``forward(ctx, *args)`` under ``no_grad`` (new-style Functions: ``forward(*args)`` then
``setup_context(ctx, inputs, output)``) and returns its result: nothing is recorded for a
backward, and ctx is dropped. Capture does the same: it inlines ``forward`` (and
``setup_context``) with grad mode off, on a ctx of its own (``InferenceCtx``) whose calls record
nothing, so an inference model with a custom Function (BLOOM's GeLU) stays one graph.

Where a gradient may flow, the user's ``backward`` decides it, which capture does not model:
``apply`` is inlined as written and breaks at ``torch._C._FunctionBase.apply``, which then runs
in Python between two graphs (the inputs' ``requires_grad`` is guarded, so the choice is made
again when it changes).
"""

from __future__ import annotations

from typing import Any

import torch

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


def apply_without_grad(
    tx, cls_var: VariableTracker, args: list, kwargs: dict
) -> VariableTracker | None:
    """``cls.apply(*args, **kwargs)`` inlined as eager runs it when nothing is recorded; None
    when a gradient may flow, or the class is not a plain Function subclass (the caller then
    inlines ``apply`` itself)."""
    cls = cls_var.real_value()
    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        return None
    if _records_gradient(args, kwargs):
        return None
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
