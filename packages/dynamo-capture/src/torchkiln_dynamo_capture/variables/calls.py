"""Call policy: what calling a real callable known at capture time does (``call_value``).

In order: what the user marked (``trace_rules``: disabled, allowed in the graph, logging that can
run after the graph), capture's own special cases (``torch.compiler.is_compiling``, symbolic
checks, ``contextlib.contextmanager`` helpers, ``itertools.chain``, higher-order operators,
activation checkpointing, grad mode), the builtin table (builtins.py), operators (operators.py),
classes (classes.py), then by where the callable comes from: the standard library runs for real
on known values, user functions are inlined, torch's callables on tensors go into the graph, other
code runs at capture time only on constants and when ``trace_rules.pure_with_constants`` says it
may; everything else breaks the graph and runs in Python.

The top of ``variables/``: trackers reach it through ``tx.call_value``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import operator
import types
import weakref

import torch
import torch.utils.checkpoint

from .. import trace_rules
from ..exc import Unsupported
from .base import (
    MUTATORS,
    NO_REAL,
    ConstantVariable,
    VariableTracker,
    all_constant,
    constant_values,
    hashable,
)
from .builtins import BUILTIN_HANDLERS
from .classes import construct
from .containers import IteratorVariable, TupleVariable
from .copies import COPIERS, copied
from .ctx import set_grad_enabled
from .functions import (
    PartialVariable,
    RawGetattributeVariable,
    RawSetattrVariable,
    UserFunctionVariable,
)
from .generators import NullContextVariable, contextmanager_call, is_contextmanager_function
from .higher_order import call_higher_order, higher_order_kind
from .logging_calls import replay_logging_call
from .numpy_arrays import NumpyNdarrayVariable
from .numpy_calls import (
    TO_TENSOR,
    call_numpy,
    is_numpy_call,
    is_numpy_scalar_type,
    numpy_operator,
    to_tensor,
)
from .operators import OPERATOR_FNS, binary_op
from .scan import ASSOCIATIVE_SCAN, call_associative_scan
from .symbolic import CHECKS, call_check
from .tensors import BACKWARD_HINT, BACKWARD_INSIDE, TensorVariable, has_tensor

#: keyword arguments of torch.utils.checkpoint.checkpoint itself (the rest go to the function)
_CHECKPOINT_OPTIONS = frozenset(
    {
        "use_reentrant",
        "context_fn",
        "determinism_check",
        "debug",
        "preserve_rng_state",
        "early_stop",
    }
)


def disabled_call(fn) -> Unsupported:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return Unsupported(
        f"calling {name}, marked disable (torch.compiler.disable / torchkiln.disable)",
        "it runs eagerly between two graphs, as asked",
    )


def _module_method_on_a_module(fn, args: list) -> bool:
    """``fn`` is a method of a torch.nn module class, written in Python, called unbound with a
    module as its first argument."""
    if not (
        isinstance(fn, types.FunctionType)
        and (fn.__module__ or "").startswith("torch.nn.modules.")
        and args
    ):
        return False
    try:
        first = args[0].python_type()
    except Exception:  # noqa: BLE001 - a value without a known Python type
        return False
    return isinstance(first, type) and issubclass(first, torch.nn.Module)


def call_value(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    """Call a real callable ``fn`` (known at capture time) with tracked arguments."""
    if isinstance(
        fn, trace_rules.CustomOpDef
    ):  # a torch.library.custom_op: its operator goes in the graph
        fn = fn._opoverload
    if (
        type(getattr(fn, "__self__", None)) in (list, dict, set)
        and getattr(fn, "__name__", "") in MUTATORS
        and id(fn.__self__) in tx.out.outside_containers
    ):
        # a bound mutator of a container capture holds as a constant (a copy): the mutation
        # would be lost, so it runs in Python
        raise Unsupported(
            f"mutating a {type(fn.__self__).__name__} held as a constant ({fn.__name__})",
            "the mutation runs in Python between two graphs",
        )
    if hashable(fn) and fn in trace_rules.IS_COMPILING:
        return ConstantVariable(True)
    if trace_rules.is_disabled(fn):
        raise disabled_call(fn)
    if trace_rules.is_reorderable_logging(fn):
        return replay_logging_call(tx, fn, args, kwargs)
    if hashable(fn) and fn in CHECKS:
        return call_check(tx, fn, args, kwargs)
    if is_contextmanager_function(fn) and tx.out.trace_contextmanagers:  # entered by BEFORE_WITH
        return contextmanager_call(
            tx, UserFunctionVariable.from_function(tx, fn, None), args, kwargs
        )
    if fn is torch.jit.annotate and len(args) == 2 and not kwargs:
        # a TorchScript type hint: eager hands its value back unchanged (CrossViT's lists)
        return args[1]
    if fn is contextlib.nullcontext:
        return NullContextVariable(
            args[0] if args else kwargs.get("enter_result", ConstantVariable(None))
        )
    if fn is itertools.chain:
        return IteratorVariable([i for it in args for i in tx.unpack(it)])
    if fn is itertools.chain.from_iterable:
        return IteratorVariable([i for it in tx.unpack(args[0]) for i in tx.unpack(it)])
    if ASSOCIATIVE_SCAN is not None and fn is ASSOCIATIVE_SCAN:  # elementwise: inlined scan
        return call_associative_scan(tx, args, kwargs)
    hop = higher_order_kind(fn)
    if hop is not None:  # torch.cond, while_loop, map: one node with traced subgraphs
        return call_higher_order(tx, hop, args, kwargs)
    if fn is torch.utils.checkpoint.checkpoint and args:
        # activation checkpointing: the region is inlined into the graph (same values; whether
        # its activations are kept or recomputed is the partitioner's choice)
        kept = {k: v for k, v in kwargs.items() if k not in _CHECKPOINT_OPTIONS}
        return tx.call_function(args[0], list(args[1:]), kept)
    if trace_rules.is_allowed_in_graph(fn):
        return tx.out.call_tensor_op(tx, "call_function", fn, args, kwargs)
    if is_numpy_call(fn, args, kwargs):  # numpy on arrays of tensors' values: into the graph
        return call_numpy(tx, fn, args, kwargs)
    if hashable(fn) and fn in TO_TENSOR and args and isinstance(args[0], NumpyNdarrayVariable):
        return to_tensor(tx, fn, args, kwargs)
    if is_numpy_scalar_type(fn) and all_constant(args, kwargs):
        a, k = constant_values(args, kwargs)
        return ConstantVariable(fn(*a, **k))
    handler = BUILTIN_HANDLERS.get(fn) if hashable(fn) else None
    if handler is not None:
        return handler(tx, *args, **kwargs)
    if hashable(fn) and fn in OPERATOR_FNS:  # a weakref hashes its referent (a dict: TypeError)
        return binary_op(tx, fn, args[0], args[1])
    if fn is operator.getitem:
        return tx.getitem(args[0], args[1])
    if fn is torch.set_grad_enabled or fn is torch._C._set_grad_enabled:
        return set_grad_enabled(tx, args[0].as_python_constant())
    if fn in (operator.not_, operator.truth):
        r = tx.truth(args[0])
        return ConstantVariable(not r if fn is operator.not_ else r)
    if fn in (operator.neg, operator.pos, operator.invert, operator.abs) and isinstance(
        args[0], NumpyNdarrayVariable
    ):
        return numpy_operator(tx, fn, args)
    if fn in (operator.neg, operator.pos, operator.invert, operator.abs) and isinstance(
        args[0], TensorVariable
    ):
        return tx.out.call_tensor_op(tx, "call_function", fn, args, kwargs)
    if isinstance(fn, type):
        return construct(tx, fn, args, kwargs)
    if isinstance(fn, operator.itemgetter):
        items = [tx.getitem(args[0], ConstantVariable(k)) for k in fn.__reduce__()[1]]
        return items[0] if len(items) == 1 else TupleVariable(items)
    if isinstance(fn, operator.attrgetter):
        vals = []
        for path in fn.__reduce__()[1]:
            v = args[0]
            for part in path.split("."):
                v = tx.getattr(v, part)
            vals.append(v)
        return vals[0] if len(vals) == 1 else TupleVariable(vals)
    if isinstance(fn, weakref.ref):
        # what it refers to is this call's business (RemovableHandle.remove reads a module's hook
        # dict through one): read once at capture, another call's handle would reach the first
        # call's dict, and the dict would come back to Python as a copy
        raise Unsupported(
            "calling a weak reference",
            "it runs in Python between two graphs, on the object it refers to then",
        )
    name = getattr(fn, "__qualname__", None) or repr(fn)
    if fn is torch.autograd.backward or fn is torch.Tensor.backward:
        raise Unsupported(BACKWARD_INSIDE, BACKWARD_HINT)
    if fn is print:
        raise Unsupported(
            "print() inside a captured function",
            "print runs in Python between two graphs; "
            "remove it or move it outside the compiled function to keep one graph",
        )
    if trace_rules.is_impure_module(getattr(fn, "__module__", None)):
        raise Unsupported(
            f"calling {fn.__module__}.{name} (it acts outside the program: output, time, files, ...)",
            "it runs in Python between two graphs; move it outside the compiled function",
        )
    if fn is object.__setattr__ and args and hasattr(args[0], "raw_store_attr"):
        # object.__setattr__(self, name, value) in a class's own __setattr__: the store itself
        return RawSetattrVariable(args[0]).call(tx, args[1:], kwargs)
    if fn is object.__getattribute__ and args and hasattr(args[0], "raw_getattr"):
        # object.__getattribute__(self, name) in its class's own __getattribute__: the lookup
        return RawGetattributeVariable(args[0]).call(tx, args[1:], kwargs)
    if trace_rules.is_stdlib(fn) and not has_tensor(args) and not has_tensor(kwargs.values()):
        # the standard library (inspect, typing, logging, ...) runs for real on known values
        real = _real_args(args, kwargs)
        if real is not None and fn in COPIERS and len(args) == 1 and not kwargs:
            made = copied(tx, fn, args[0], real[0][0])  # a copy's new objects: built in capture
            if made is not None:
                return made
        if real is not None:
            try:
                return tx.wrap(fn(*real[0], **real[1]), None)
            except Exception as e:
                raise Unsupported(
                    f"calling {fn.__qualname__} raised {type(e).__name__}: {e}"
                ) from e
    if trace_rules.is_stdlib(fn):
        return UserFunctionVariable.from_function(tx, fn, None).call(tx, args, kwargs)
    if _module_method_on_a_module(fn, args):
        # ``nn.LayerNorm.forward(self, x)`` from a subclass's forward (SqueezeBERT): inlined,
        # as the module's own call inlines it
        return UserFunctionVariable.from_function(tx, fn, None).call(tx, args, kwargs)
    if isinstance(fn, types.FunctionType) and not (
        trace_rules.is_torch_callable(fn)
        and not fn.__module__.startswith(trace_rules.INLINE_TORCH_MODULES)
    ):
        return UserFunctionVariable.from_function(tx, fn, None).call(tx, args, kwargs)
    if (
        isinstance(fn, types.MethodType)
        and isinstance(fn.__func__, types.FunctionType)
        and not trace_rules.is_torch_callable(fn.__func__)
    ):
        return UserFunctionVariable.from_function(
            tx, fn.__func__, None, self_var=tx.wrap(fn.__self__, None)
        ).call(tx, args, kwargs)
    if isinstance(fn, functools.partial):
        return PartialVariable(
            tx.wrap(fn.func, None),
            [tx.wrap(a, None) for a in fn.args],
            {k: tx.wrap(v, None) for k, v in fn.keywords.items()},
        ).call(tx, args, kwargs)
    if trace_rules.is_torch_callable(fn) or has_tensor(args) or has_tensor(kwargs.values()):
        if fn in (torch.is_grad_enabled,):
            return ConstantVariable(torch.is_grad_enabled())
        if has_tensor(args) or has_tensor(kwargs.values()) or trace_rules.makes_tensor(fn):
            if not trace_rules.is_torch_callable(fn) and fn not in (math.sqrt,):
                raise Unsupported(f"calling {getattr(fn, '__qualname__', fn)!r} on tensors")
            if (
                args
                and isinstance(args[0], TensorVariable)
                and trace_rules.runs_recurrent_eagerly(fn, args[0].fake.device)
            ):
                raise Unsupported(
                    f"torch._VF.{fn.__name__} on {args[0].fake.device.type} (an LSTM, GRU or RNN "
                    "module): ATen views the weights' storage as cuDNN's weight buffer, which no "
                    "graph can hold",
                    "the recurrent module runs eagerly, with cuDNN, between two graphs",
                )
            return tx.out.call_tensor_op(tx, "call_function", fn, args, kwargs)
    if all_constant(args, kwargs):
        a, k = constant_values(args, kwargs)
        if not trace_rules.pure_with_constants(fn):
            raise Unsupported(
                f"calling {name} (capture cannot prove it has no side effects)",
                "it runs in Python between two graphs",
            )
        try:
            return tx.wrap(fn(*a, **k), None)
        except Exception as e:
            raise Unsupported(
                f"calling {getattr(fn, '__qualname__', fn)!r} raised {type(e).__name__}: {e}"
            ) from e
    raise Unsupported(
        f"calling {getattr(fn, '__qualname__', repr(fn))!r} with arguments not known at capture time",
        "the call runs in Python between two graphs, on real values; a torch equivalent "
        "(torch.isfinite for np.isfinite, ...) keeps it in the graph",
    )


def _real_args(args, kwargs):
    out = []
    for a in [*args, *kwargs.values()]:
        if a.is_python_constant():
            out.append(a.as_python_constant())
        else:
            r = a.real_value()
            if r is NO_REAL:
                return None
            out.append(r)
    return out[: len(args)], dict(zip(kwargs, out[len(args) :]))
