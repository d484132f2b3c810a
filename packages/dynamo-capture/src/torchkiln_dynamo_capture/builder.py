"""Wrap a real Python value met during capture in a VariableTracker, adding the guards it needs."""

from __future__ import annotations

import dataclasses
import enum
import functools
import types

import torch
from torchkiln_guards import ConstantMatch, DictKeysMatch, IdMatch, LengthMatch, TypeMatch

from ._guards import ValueEqualsMatch
from ._sources import (
    AttrSource,
    HeldObjectSource,
    ItemSource,
    LocalSource,
    ViewDictSource,
    view_dict,
)
from .trace_rules import INLINE_TORCH_MODULES, CustomOpDef, is_stdlib, is_torch_callable
from .variables.base import BoundMethodVariable, ConstantVariable
from .variables.containers import DictVariable, DictViewVariable, ListVariable, TupleVariable
from .variables.ctx import (
    AutocastExit,
    ContextExitVariable,
    GradModeExit,
    _no_exit,
    autocast_exit_variable,
)
from .variables.ctx import _set_grad as set_grad
from .variables.functions import PartialVariable, UserFunctionVariable
from .variables.modules import NNModuleVariable
from .variables.numpy_calls import is_ndarray, is_traced_numpy_function, ndarray_input
from .variables.objects import UserObjectVariable
from .variables.triton_kernels import TritonKernelVariable, is_triton_kernel

_VALUE_TYPES = (int, float, bool, str, type(None), complex, bytes)
_OPAQUE_CONSTANTS = (
    torch.dtype,
    torch.device,
    torch.Size,
    torch.layout,
    torch.memory_format,
    slice,
    range,
    type(Ellipsis),
    type(NotImplemented),
    frozenset,
    enum.Enum,
    torch.finfo,
    torch.iinfo,
)
_TORCH_OPS = (
    torch._ops._OpNamespace,
    torch._ops.OpOverloadPacket,
    torch._ops.OpOverload,
    torch._ops.HigherOrderOperator,
)
_DICT_VIEWS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items"}
_CALLABLE_TYPES = (
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
)


def wrap(tx, value, source):
    """The VariableTracker for ``value`` found at ``source`` (None: a constant not worth guarding)."""
    out = tx.out
    cached = out.var_cache.get(id(value))
    if cached is not None:
        if cached.untracked_real and source is not None:
            # first reached with no source, now with one: mutations can be written back through it
            out.guards.append(IdMatch(source, value))
            cached.source, cached.untracked_real = source, False
        return cached
    t = type(value)
    g = out.guards
    if isinstance(value, torch.Tensor):
        return out.wrap_input_tensor(tx, value, source)
    if is_ndarray(value) and source is not None:
        # a numpy array argument (or one handed over a graph break): its values enter the graph
        # as a tensor sharing its memory, as TorchDynamo does (variables/numpy_arrays.py)
        array = ndarray_input(tx, value, source)
        if array is not None:
            return array
    if isinstance(value, AutocastExit):
        # an open autocast block handed over by a graph break (see variables/ctx.py)
        if source is not None:
            g.append(IdMatch(source, value))
        return autocast_exit_variable(tx, value)
    if isinstance(value, GradModeExit) or value is _no_exit:
        # an open with-block handed over by a graph break (see variables/ctx.py)
        if source is not None:
            g.append(IdMatch(source, value))
        if value is _no_exit:
            return ContextExitVariable(lambda: None, value)
        return ContextExitVariable(lambda: set_grad(tx, value.prev), value)
    if (
        (t is int or t is torch.Size)
        and source is not None
        and (dims := out.dynamic_int_dims(value, source))
    ):
        return _symbolic_ints(tx, value, source, dims)
    if t in _VALUE_TYPES:
        if source is not None:
            g.append(ConstantMatch(source, value))
        return ConstantVariable(value, source)
    if (
        isinstance(value, types.BuiltinMethodType)
        and isinstance(value.__self__, torch.Tensor)
        and source is not None
    ):
        # a tensor's bound method handed to a continuation: a new object each call, so it is
        # tracked as (tensor, name), not guarded by identity
        g.append(ValueEqualsMatch(AttrSource(source, "__name__"), value.__name__))
        self_var = wrap(tx, value.__self__, AttrSource(source, "__self__"))
        return BoundMethodVariable(self_var, value.__name__)
    if isinstance(value, (*_TORCH_OPS, CustomOpDef)):
        # torch.ops.<ns>, its OpOverloadPackets and OpOverloads (aten, prims, custom operators
        # registered with torch.library), torch.ops.higher_order.*: process-wide singletons,
        # called into the graph as they are (control flow: variables/higher_order.py)
        if source is not None and not isinstance(source, AttrSource):
            g.append(IdMatch(source, value))
        return ConstantVariable(value, source)
    if is_triton_kernel(value):
        # a user's @triton.jit kernel: kernel[grid](...) is one graph call (variables/triton_kernels.py)
        if source is not None:
            g.append(IdMatch(source, value))
        return TritonKernelVariable(value, source)
    if isinstance(value, (*_OPAQUE_CONSTANTS, types.ModuleType, *_CALLABLE_TYPES)):
        if source is not None and isinstance(value, _CALLABLE_TYPES):
            # a bound builtin method read off an object is a new object each time: not guardable by id
            if not isinstance(source, AttrSource):
                g.append(IdMatch(source, value))
        elif source is not None and not isinstance(value, types.ModuleType):
            g.append(_constant_guard(source, value))
        return ConstantVariable(value, source)
    if isinstance(value, type):
        if source is not None:
            g.append(IdMatch(source, value))
        return ConstantVariable(value, source)
    if t is tuple or (isinstance(value, tuple) and hasattr(t, "_fields")):
        if source is not None:
            g.append(TypeMatch(source, t))
            g.append(LengthMatch(source, len(value)))
        items = [
            wrap(tx, v, ItemSource(source, i) if source is not None else None)
            for i, v in enumerate(value)
        ]
        return TupleVariable(items, source, cls=t)
    if t is list:
        if source is not None:
            g.append(TypeMatch(source, t))
            g.append(LengthMatch(source, len(value)))
        items = [
            wrap(tx, v, ItemSource(source, i) if source is not None else None)
            for i, v in enumerate(value)
        ]
        return out.remember(value, _mark_untracked(ListVariable(items, source)))
    if t is dict or (isinstance(value, dict) and t.__module__ == "collections"):
        keys = tuple(value.keys())
        if source is not None:
            g.append(TypeMatch(source, t))
            g.append(DictKeysMatch(source, keys))
        items = {
            k: wrap(tx, v, ItemSource(source, k) if source is not None else None)
            for k, v in value.items()
        }
        return out.remember(value, _mark_untracked(DictVariable(items, source, cls=t)))
    if t in _DICT_VIEWS:
        # a live view handed over by a graph break: track the dict it reads, so later changes to
        # the dict show through the view (as in eager)
        if source is not None:
            g.append(TypeMatch(source, t))
        d = view_dict(value)
        dict_var = wrap(tx, d, ViewDictSource(source) if source is not None else None)
        if not isinstance(dict_var, DictVariable):
            return UserObjectVariable(value, source)
        return DictViewVariable(dict_var, _DICT_VIEWS[t])
    if t in (set,):
        # a set from outside is a constant to capture; mutating it breaks the graph (call_value),
        # so the mutation runs on the set itself: through its source, or held when it has none
        held = set(value) if source is not None else value
        if source is not None:
            g.append(ValueEqualsMatch(source, held))
        out.outside_containers.add(id(held))
        out.keepalive.append(held)
        return ConstantVariable(held, source)
    if isinstance(value, torch.nn.Module):
        # submodules reached through a guarded module are not re-guarded (the root's identity
        # stands for its tree, as for parameters): guard cost stays flat in model depth
        if source is not None and not isinstance(
            source, (AttrSource, ItemSource, HeldObjectSource)
        ):
            if isinstance(source, LocalSource) and _stateless_torch_module(value):
                # nothing of it is baked into the graph: every attribute capture reads is guarded
                # through the source, its hooks by ModuleHooksMatch (which NNModuleVariable.call
                # uses for a local; other sources get the hook dicts held by reference). A module
                # made inside the function reaches a continuation as a new object on every call,
                # and an identity guard would recompile each time
                g.append(TypeMatch(source, t))
            else:
                g.append(IdMatch(source, value))
        return out.remember(value, NNModuleVariable(value, source))
    if isinstance(value, types.FunctionType) and (
        is_stdlib(value)
        or is_torch_callable(value)
        and not value.__module__.startswith(INLINE_TORCH_MODULES)
        or is_traced_numpy_function(value)
    ):
        return ConstantVariable(value, source)
    if isinstance(value, types.FunctionType):
        if source is not None and "<locals>" in value.__qualname__:
            # a nested function is a new object each time its frame runs (a continuation gets
            # it as an argument): guarded by its code; its cells and defaults are guarded as read
            g.append(IdMatch(AttrSource(source, "__code__"), value.__code__))
            return UserFunctionVariable.from_function(tx, value, source, by_code=True)
        if source is not None:
            g.append(IdMatch(source, value))
        return UserFunctionVariable.from_function(tx, value, source)
    if isinstance(value, types.MethodType):
        self_src = AttrSource(source, "__self__") if source is not None else None
        self_var = wrap(tx, value.__self__, self_src)
        if isinstance(value.__func__, types.FunctionType):
            return UserFunctionVariable.from_function(tx, value.__func__, None, self_var=self_var)
        # a compiled (Cython) method: bound to this call's object, read from the source again
        return ConstantVariable(value, source)
    if isinstance(value, functools.partial):
        if source is not None:
            g.append(TypeMatch(source, t))
        return PartialVariable(
            wrap(tx, value.func, AttrSource(source, "func") if source is not None else None),
            [
                wrap(
                    tx, a, ItemSource(AttrSource(source, "args"), i) if source is not None else None
                )
                for i, a in enumerate(value.args)
            ],
            {
                k: wrap(
                    tx,
                    v,
                    ItemSource(AttrSource(source, "keywords"), k) if source is not None else None,
                )
                for k, v in value.keywords.items()
            },
            source,
        )
    if (
        callable(value)
        and not dataclasses.is_dataclass(value)
        and (getattr(value, "__module__", "") or "").startswith("torch")
        and not hasattr(value, "__dict__")
    ):
        return ConstantVariable(value, source)
    if source is not None:
        g.append(TypeMatch(source, t))
    return out.remember(value, _mark_untracked(UserObjectVariable(value, source)))


def _stateless_torch_module(m: torch.nn.Module) -> bool:
    """A torch.nn module with no parameters, buffers or submodules (``nn.ReLU()``, ``nn.Dropout(p)``):
    its parameters would be graph constants and its children are guarded through its own dicts,
    so only a module with neither may be told apart by type and guarded attributes alone."""
    d = m.__dict__
    return (
        (type(m).__module__ or "").startswith("torch.nn.")
        and not d.get("_parameters")
        and not d.get("_buffers")
        and not d.get("_modules")
    )


def _symbolic_ints(tx, value, source, dims):
    """An int or torch.Size argument whose items (``dims``) are symbolic graph inputs: a size
    handed over a graph break, or an int that changed between calls (automatic dynamic)."""
    out = tx.out
    if type(value) is int:
        return out.wrap_input_int(value, source, size=False)
    out.guards.append(TypeMatch(source, torch.Size))
    out.guards.append(LengthMatch(source, len(value)))
    items = []
    for i, v in enumerate(value):
        item = ItemSource(source, i)
        if i in dims:
            items.append(out.wrap_input_int(v, item, size=True))
        else:
            out.guards.append(ConstantMatch(item, v))
            items.append(ConstantVariable(v, item))
    return TupleVariable(items, source, cls=torch.Size)


def _mark_untracked(var):
    """A real mutable object wrapped with no source may be read, never mutated (see SideEffects)."""
    var.untracked_real = var.source is None
    return var


def _constant_guard(source, value):
    """ConstantMatch where torchkiln_guards accepts the value, identity for enums, else equality."""
    if isinstance(value, enum.Enum):
        return IdMatch(source, value)
    try:
        return ConstantMatch(source, value)
    except TypeError:  # torch.Size, slice, range, finfo, ...: not an immutable constant to it
        return ValueEqualsMatch(source, value)
