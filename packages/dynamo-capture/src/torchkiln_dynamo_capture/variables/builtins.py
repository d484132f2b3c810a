"""Calls to builtins, ``operator``, ``math``, classes and everything else that is not a user function."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import inspect
import itertools
import math
import operator
import sys
import types
import weakref

import torch
import torch.utils.checkpoint

from .. import trace_rules
from ..exc import Unsupported
from .base import (
    _MUTATORS,
    BINARY_OPS,
    COMPARE_OPS,
    INPLACE_TO_BINARY,
    NO_REAL,
    AttrMissing,
    ConstantVariable,
    VariableTracker,
)
from .containers import (
    DataclassVariable,
    DictVariable,
    IteratorVariable,
    ListVariable,
    TupleVariable,
)
from .functions import PartialVariable, SuperVariable, UserFunctionVariable
from .generators import NullContextVariable, contextmanager_call, is_contextmanager_function
from .higher_order import call_higher_order, higher_order_kind
from .symbolic import CHECKS, call_check, is_symbolic, sym_binary, sym_min_max
from .tensors import TensorVariable

try:
    from torch._library.custom_ops import CustomOpDef as _CustomOpDef
except ImportError:  # torch without torch.library.custom_op
    class _CustomOpDef:  # type: ignore[no-redef]
        pass

#: keyword arguments of torch.utils.checkpoint.checkpoint itself (the rest go to the function)
_CHECKPOINT_OPTIONS = frozenset({"use_reentrant", "context_fn", "determinism_check", "debug",
                                 "preserve_rng_state", "early_stop"})

_OPERATOR_FNS = set(BINARY_OPS.values()) | set(COMPARE_OPS.values())
# torch Python functions that wrap a user function (decorators): inlined rather than put in the graph
_INLINE_TORCH_MODULES = ("torch.utils._contextlib", "torch.amp.autocast_mode")


def _all_const(args, kwargs) -> bool:
    return all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values())


def _consts(args, kwargs):
    return [a.as_python_constant() for a in args], {k: v.as_python_constant() for k, v in kwargs.items()}


def _has_tensor(vts) -> bool:
    for v in vts:
        if isinstance(v, TensorVariable):
            return True
        if isinstance(v, (ListVariable, TupleVariable)) and _has_tensor(v.items):
            return True
        if isinstance(v, DictVariable) and _has_tensor(v.items.values()):
            return True
    return False


def disabled_call(fn) -> Unsupported:
    name = getattr(fn, "__qualname__", None) or repr(fn)
    return Unsupported(f"calling {name}, marked disable (torch.compiler.disable / torchkiln.disable)",
                       "it runs eagerly between two graphs, as asked")


def is_torch_callable(fn) -> bool:
    mod = getattr(fn, "__module__", None) or ""
    if isinstance(fn, (types.MethodDescriptorType, types.WrapperDescriptorType)) and getattr(fn, "__objclass__", None) in (torch.Tensor, torch._C.TensorBase):
        return True
    if getattr(fn, "__self__", None) is torch._C._VariableFunctions or mod.startswith("torch._C"):
        return True
    return mod == "torch" or mod.startswith("torch.")


def call_value(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    """Call a real callable ``fn`` (known at capture time) with tracked arguments."""
    if isinstance(fn, _CustomOpDef):  # a torch.library.custom_op: its operator goes in the graph
        fn = fn._opoverload
    if type(getattr(fn, "__self__", None)) in (list, dict, set) and getattr(fn, "__name__", "") in _MUTATORS \
            and id(fn.__self__) in tx.out.outside_containers:
        # a bound mutator of a container capture holds as a constant (a copy): the mutation
        # would be lost, so it runs in Python
        raise Unsupported(f"mutating a {type(fn.__self__).__name__} held as a constant ({fn.__name__})",
                          "the mutation runs in Python between two graphs")
    if _hashable(fn) and fn in trace_rules.IS_COMPILING:
        return ConstantVariable(True)
    if trace_rules.is_disabled(fn):
        raise disabled_call(fn)
    if trace_rules.is_reorderable_logging(fn):
        from .logging_calls import replay_logging_call

        return replay_logging_call(tx, fn, args, kwargs)
    if _hashable(fn) and fn in CHECKS:
        return call_check(tx, fn, args, kwargs)
    if is_contextmanager_function(fn) and tx.out.trace_contextmanagers:  # entered by BEFORE_WITH
        return contextmanager_call(tx, UserFunctionVariable.from_function(tx, fn, None), args, kwargs)
    if fn is contextlib.nullcontext:
        return NullContextVariable(args[0] if args else kwargs.get("enter_result", ConstantVariable(None)))
    if fn is itertools.chain:
        return IteratorVariable([i for it in args for i in tx.unpack(it)])
    if fn is itertools.chain.from_iterable:
        return IteratorVariable([i for it in tx.unpack(args[0]) for i in tx.unpack(it)])
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
    handler = _BUILTIN_HANDLERS.get(fn) if _hashable(fn) else None
    if handler is not None:
        return handler(tx, *args, **kwargs)
    if _hashable(fn) and fn in _OPERATOR_FNS:  # a weakref hashes its referent (a dict: TypeError)
        return binary_op(tx, fn, args[0], args[1])
    if fn is operator.getitem:
        return tx.getitem(args[0], args[1])
    if fn is torch.set_grad_enabled or fn is torch._C._set_grad_enabled:
        from .ctx import set_grad_enabled

        return set_grad_enabled(tx, args[0].as_python_constant())
    if fn in (operator.not_, operator.truth):
        r = tx.truth(args[0])
        return ConstantVariable(not r if fn is operator.not_ else r)
    if fn in (operator.neg, operator.pos, operator.invert, operator.abs) and isinstance(args[0], TensorVariable):
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
        raise Unsupported("calling a weak reference", "it runs in Python between two graphs, on the object "
                          "it refers to then")
    name = getattr(fn, "__qualname__", None) or repr(fn)
    if fn is print:
        raise Unsupported("print() inside a captured function", "print runs in Python between two graphs; "
                          "remove it or move it outside the compiled function to keep one graph")
    if is_impure_module(getattr(fn, "__module__", None)):
        raise Unsupported(f"calling {fn.__module__}.{name} (it acts outside the program: output, time, files, ...)",
                          "it runs in Python between two graphs; move it outside the compiled function")
    if _is_stdlib(fn) and not _has_tensor(args) and not _has_tensor(kwargs.values()):
        # the standard library (inspect, typing, logging, ...) runs for real on known values
        real = _real_args(args, kwargs)
        if real is not None:
            try:
                return tx.wrap(fn(*real[0], **real[1]), None)
            except Exception as e:
                raise Unsupported(f"calling {fn.__qualname__} raised {type(e).__name__}: {e}") from e
    if _is_stdlib(fn):
        return UserFunctionVariable.from_function(tx, fn, None).call(tx, args, kwargs)
    if isinstance(fn, types.FunctionType) and not (is_torch_callable(fn) and not fn.__module__.startswith(_INLINE_TORCH_MODULES)):
        return UserFunctionVariable.from_function(tx, fn, None).call(tx, args, kwargs)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and not is_torch_callable(fn.__func__):
        return UserFunctionVariable.from_function(tx, fn.__func__, None, self_var=tx.wrap(fn.__self__, None)).call(tx, args, kwargs)
    if isinstance(fn, functools.partial):
        return PartialVariable(tx.wrap(fn.func, None), [tx.wrap(a, None) for a in fn.args],
                               {k: tx.wrap(v, None) for k, v in fn.keywords.items()}).call(tx, args, kwargs)
    if is_torch_callable(fn) or _has_tensor(args) or _has_tensor(kwargs.values()):
        if fn in (torch.is_grad_enabled,):
            return ConstantVariable(torch.is_grad_enabled())
        if _has_tensor(args) or _has_tensor(kwargs.values()) or _makes_tensor(fn):
            if not is_torch_callable(fn) and fn not in (math.sqrt,):
                raise Unsupported(f"calling {getattr(fn, '__qualname__', fn)!r} on tensors")
            return tx.out.call_tensor_op(tx, "call_function", fn, args, kwargs)
    if _all_const(args, kwargs):
        a, k = _consts(args, kwargs)
        if not _pure_with_constants(fn):
            raise Unsupported(f"calling {name} (capture cannot prove it has no side effects)",
                              "it runs in Python between two graphs")
        try:
            return tx.wrap(fn(*a, **k), None)
        except Exception as e:
            raise Unsupported(f"calling {getattr(fn, '__qualname__', fn)!r} raised {type(e).__name__}: {e}") from e
    raise Unsupported(f"calling {getattr(fn, '__qualname__', repr(fn))!r} with arguments not known at capture time",
                      "the call runs in Python between two graphs, on real values; a torch equivalent "
                      "(torch.isfinite for np.isfinite, ...) keeps it in the graph")


#: standard-library modules whose functions act on the world (output, clocks, randomness, files,
#: processes): never run at capture time nor inlined; a call breaks the graph and runs in Python
IMPURE_MODULES = frozenset({
    "logging", "warnings", "os", "posix", "nt", "sys", "time", "random", "io", "_io", "subprocess", "shutil",
    "tempfile", "socket", "threading", "multiprocessing", "pathlib", "datetime", "uuid", "secrets", "pdb",
    "traceback", "signal", "select", "atexit", "gc", "faulthandler", "sched", "asyncio", "builtins.input",
})
#: builtins that are not pure functions of their arguments
_IMPURE_BUILTINS = frozenset({"print", "input", "open", "exec", "eval", "compile", "breakpoint", "exit", "quit",
                              "help", "globals", "locals", "delattr", "__import__"})
#: modules whose C functions are pure functions of constant arguments (run at capture time)
_PURE_C_MODULES = frozenset({"builtins", "math", "cmath", "operator", "_operator", "itertools", "functools",
                             "_functools", "collections", "_collections", "string", "re", "_sre", "keyword",
                             "numbers", "typing", "enum", "types", "abc", "_abc", "copy", "inspect", "struct",
                             "_struct", "binascii", "zlib", "_bisect", "bisect", "unicodedata"})


def is_impure_module(modname: str | None) -> bool:
    return bool(modname) and modname.split(".")[0] in IMPURE_MODULES


def _pure_with_constants(fn) -> bool:
    """Whether running ``fn`` at capture time on constant arguments is the same as running it later.

    Methods of objects are (``str.join``, ``dict.get``, ``mappingproxy.__len__``) unless the object
    belongs to a module that acts on the world (files, random generators); module-level C functions
    are only for modules known to be pure: any other C function is unknown code and breaks.
    """
    owner = getattr(fn, "__self__", None)
    if isinstance(fn, type):
        return True
    if trace_rules.changes_torch_state(fn):
        return False
    if owner is not None and not isinstance(owner, types.ModuleType):
        # torch.distributed's objects act on every call (an all-reduce, a reducer told a
        # backward is coming): run once at capture time, later calls would silently skip them
        return not is_impure_module(type(owner).__module__) and not trace_rules.talks_to_other_processes(owner)
    mod = getattr(fn, "__module__", None) or getattr(owner, "__name__", "") or ""
    if mod == "builtins":
        return getattr(fn, "__name__", "") not in _IMPURE_BUILTINS
    if not isinstance(fn, types.BuiltinFunctionType):
        return not is_impure_module(mod)
    top = mod.split(".")[0]
    return top in ("torch", "numpy", "sympy") or top in _PURE_C_MODULES


def _is_stdlib(fn) -> bool:
    mod = getattr(fn, "__module__", None) or ""
    return isinstance(fn, (types.FunctionType, types.MethodType)) and mod.split(".")[0] in sys.stdlib_module_names and mod != "functools"


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
    return out[:len(args)], dict(zip(kwargs, out[len(args):]))


def _hashable(fn) -> bool:
    try:
        hash(fn)
        return True
    except TypeError:
        return False


_TENSOR_FACTORIES = {torch.ones, torch.zeros, torch.empty, torch.full, torch.arange, torch.rand, torch.randn, torch.randint,
                     torch.tensor, torch.eye, torch.linspace, torch.ones_like, torch.zeros_like, torch.as_tensor,
                     torch.scalar_tensor, torch.randperm, torch.empty_like, torch.full_like, torch.tril_indices, torch.triu_indices}


def _makes_tensor(fn) -> bool:
    return fn in _TENSOR_FACTORIES


def construct(tx, cls: type, args, kwargs) -> VariableTracker:
    """``cls(*args, **kwargs)`` for a class known at capture time."""
    if cls in _BUILTIN_HANDLERS:
        return _BUILTIN_HANDLERS[cls](tx, *args, **kwargs)
    if issubclass(cls, torch.nn.Module):
        return _stateless_module(tx, cls, args, kwargs)
    if dataclasses.is_dataclass(cls):
        return DataclassVariable.create(tx, cls, args, kwargs)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        names = list(cls._fields)
        vals = list(args) + [None] * (len(names) - len(args))
        for k, v in kwargs.items():
            vals[names.index(k)] = v
        for i, v in enumerate(vals):
            if v is None:
                d = cls._field_defaults.get(names[i], inspect.Parameter.empty)
                if d is inspect.Parameter.empty:
                    raise Unsupported(f"{cls.__name__}() missing {names[i]!r}")
                vals[i] = tx.wrap(d, None)
        return TupleVariable(vals, cls=cls)
    outside = [v for v in (*args, *kwargs.values())
               if isinstance(v, (ListVariable, DictVariable)) and getattr(v, "source", None) is not None]
    if outside and cls.__module__ != "builtins":
        # made now from constants, it would hold capture's copy of that list or dict, not the
        # object itself (RemovableHandle keeps a weak reference to a module's hook dict: the
        # copy died, and handle.remove() removed nothing)
        raise Unsupported(f"constructing {cls.__qualname__} from a {outside[0].python_type().__name__} "
                          "that existed before the call", "it is made in Python, holding the object itself")
    if _all_const(args, kwargs) and (cls.__module__ in ("builtins", "torch", "operator", "functools", "contextlib") or cls.__module__.startswith(("torch.", "enum", "collections"))):
        a, k = _consts(args, kwargs)
        return tx.wrap(cls(*a, **k), None)
    if cls.__module__ == "builtins" or cls.__module__.startswith("torch"):
        if _has_tensor(args) or _has_tensor(kwargs.values()):
            return tx.out.call_tensor_op(tx, "call_function", cls, args, kwargs)
        raise Unsupported(f"constructing {cls.__name__} from values not known at capture time")
    if cls.__new__ is not object.__new__ or type(cls).__call__ is not type.__call__:
        # a metaclass that only adds class-level behaviour (abc.ABCMeta: transformers' cache
        # layers, collections.abc bases) makes instances as type does; one with its own
        # __call__, or a custom __new__, may return anything
        raise Unsupported(f"constructing {cls.__qualname__} (custom __new__ or metaclass)")
    if getattr(cls, "__abstractmethods__", None):
        raise Unsupported(f"constructing {cls.__qualname__}, an abstract class",
                          "it runs in Python, which raises eager's TypeError")
    from .objects import NewObjectVariable

    obj = NewObjectVariable(cls)
    init = cls.__init__
    if init is not object.__init__:
        tx.call_function(tx.wrap(init, None), [obj, *args], kwargs)
    return obj


def _stateless_module(tx, cls: type, args, kwargs) -> VariableTracker:
    """``torch.nn.CrossEntropyLoss()``, ``nn.GELU()``, ... made inside a forward (transformers'
    heads build their loss this way): a torch.nn module with constant arguments and no parameters
    or buffers is made at capture time and inlined; its calls are its forward, as in eager."""
    from .modules import NewModuleVariable

    if not (cls.__module__ or "").startswith("torch.nn.") or not _all_const(args, kwargs):
        raise Unsupported(f"creating a {cls.__name__} module inside a captured function")
    a, k = _consts(args, kwargs)
    try:
        module = cls(*a, **k)
    except Exception as e:
        raise Unsupported(f"creating a {cls.__name__} module raised {type(e).__name__}: {e}") from e
    if any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        raise Unsupported(f"creating a {cls.__name__} module (with parameters or buffers) inside a "
                          "captured function", "create it in __init__ so its weights persist")
    tx.out.keepalive.append(module)
    return NewModuleVariable(module, a, k)


# --- operators ------------------------------------------------------------------------------------

def binary_op(tx, fn, a: VariableTracker, b: VariableTracker) -> VariableTracker:
    if (is_symbolic(a) or is_symbolic(b)) and not isinstance(a, TensorVariable) and not isinstance(b, TensorVariable) \
            and a.is_python_constant() and b.is_python_constant():
        return sym_binary(tx, fn, a, b)
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        if not isinstance(a, TensorVariable):  # `number += tensor` rebinds: not in-place
            fn = INPLACE_TO_BINARY.get(fn, fn)
        return tx.out.call_tensor_op(tx, "call_function", fn, [a, b], {})
    if a.is_python_constant() and b.is_python_constant() and not isinstance(a, (ListVariable, DictVariable)) \
            and not (_holds_symbolic(a) or _holds_symbolic(b)):
        try:
            return tx.wrap(fn(a.as_python_constant(), b.as_python_constant()), None)
        except Exception as e:
            raise Unsupported(f"{fn.__name__} on constants raised {type(e).__name__}: {e}") from e
    base = INPLACE_TO_BINARY.get(fn, fn)
    if isinstance(a, ListVariable) and fn is operator.iadd:
        a.call_method(tx, "extend", [b], {})
        return a
    if isinstance(a, (ListVariable, TupleVariable)) and base is operator.add and isinstance(b, (ListVariable, TupleVariable)):
        return type(a)._new_like(a, a.items + b.items)
    if base is operator.add and _holds_symbolic(b) and isinstance(a, ConstantVariable) \
            and isinstance(a.value, tuple) and isinstance(b, TupleVariable):
        # a constant tuple (a torch.Size of static dims) + a tuple holding symbolic sizes
        return TupleVariable([ConstantVariable(v) for v in a.value] + list(b.items))
    if isinstance(a, (ListVariable, TupleVariable)) and base is operator.mul and b.is_python_constant():
        return type(a)._new_like(a, a.items * b.as_python_constant())
    if fn in (operator.eq, operator.ne) and isinstance(a, DataclassVariable) and isinstance(b, DataclassVariable):
        equal = a.equals(b)
        if equal is not None:
            return ConstantVariable(equal if fn is operator.eq else not equal)
    if fn in (operator.eq, operator.ne):
        ra, rb = a.real_value(), b.real_value()
        if ra is not NO_REAL and rb is not NO_REAL:
            return ConstantVariable(fn(ra, rb))
        if (ra is None or rb is None) or type(a) is not type(b):
            return ConstantVariable(fn is operator.ne)
    if isinstance(a, DictVariable) and base is operator.or_ and isinstance(b, DictVariable):
        return DictVariable({**a.items, **b.items}, cls=a.cls)
    r = _user_dunder(tx, fn, a, b)
    if r is not None:
        return r
    raise Unsupported(f"operator {fn.__name__} on {type(a).__name__} and {type(b).__name__}")


def _holds_symbolic(v: VariableTracker) -> bool:
    """A tuple or list holding a symbolic size: folding it to a constant would specialize the
    size (``x.size()[:-1] + (n,)`` in GPT-2 made every sequence length recompile)."""
    return isinstance(v, (TupleVariable, ListVariable)) and any(
        is_symbolic(i) or _holds_symbolic(i) for i in v.items)


def _user_dunder(tx, fn, a, b):
    from .objects import NewObjectVariable, UserObjectVariable

    name = getattr(fn, "__name__", "").strip("_")
    for obj, other, dunder in ((a, b, f"__{name}__"), (b, a, f"__r{name}__")):
        if isinstance(obj, (NewObjectVariable, UserObjectVariable)) and any(
                dunder in k.__dict__ for k in obj.python_type().__mro__[:-1]):
                return obj.var_getattr(tx, dunder).call(tx, [other], {})
    return None


def identity(a: VariableTracker, b: VariableTracker) -> bool:
    if a is b:
        return True
    ra, rb = a.real_value(), b.real_value()
    if ra is not NO_REAL and rb is not NO_REAL:
        return ra is rb
    return False


def contains(tx, item: VariableTracker, container: VariableTracker) -> bool:
    if isinstance(container, (DictVariable,)) or hasattr(container, "call_method") and isinstance(container, DataclassVariable):
        return container.call_method(tx, "__contains__", [item], {}).as_python_constant()
    if isinstance(container, (ListVariable, TupleVariable)):
        if isinstance(item, TensorVariable):
            return any(identity(item, x) for x in container.items)
        v = item.as_python_constant()
        return any(x.is_python_constant() and x.as_python_constant() == v for x in container.items)
    if container.is_python_constant() and item.is_python_constant():
        return item.as_python_constant() in container.as_python_constant()
    from .modules import NNModuleVariable

    if isinstance(container, NNModuleVariable):
        return container.call_method(tx, "__contains__", [item], {}).as_python_constant()
    return tx.truth(container.call_method(tx, "__contains__", [item], {}))


# --- builtins ---------------------------------------------------------------------------------------

def _len(tx, x):
    if isinstance(x, (ListVariable, TupleVariable)):
        return ConstantVariable(len(x.items))
    if isinstance(x, TensorVariable):
        return ConstantVariable(x.fake.shape[0])
    if x.is_python_constant():
        return ConstantVariable(len(x.as_python_constant()))
    return x.call_method(tx, "__len__", [], {})


def _isinstance(tx, obj, cls):
    c = cls.as_python_constant()
    t = obj.python_type()
    if t is torch.Tensor and isinstance(obj, TensorVariable):
        return ConstantVariable(issubclass(obj.cls, c) if isinstance(c, type) else any(issubclass(obj.cls, k) for k in c))
    real = obj.real_value()
    if real is not NO_REAL:
        return ConstantVariable(isinstance(real, c))
    return ConstantVariable(issubclass(t, c) if isinstance(c, type) else any(issubclass(t, k) for k in c))


def _getattr(tx, obj, name, default=None):
    try:
        return tx.getattr(obj, name.as_python_constant())
    except AttrMissing:
        if default is None:
            raise Unsupported(f"getattr: missing attribute {name.as_python_constant()!r}") from None
        return default


def _hasattr(tx, obj, name):
    try:
        tx.getattr(obj, name.as_python_constant())
        found = True
    except AttrMissing:
        found = False
    if obj.source is not None and not isinstance(obj, TensorVariable):
        from torchkiln_guards import HasAttr

        tx.out.guards.append(HasAttr(obj.source, name.as_python_constant(), found))
    return ConstantVariable(found)


def _setattr(tx, obj, name, value):
    obj.store_attr(tx, name.as_python_constant(), value)
    return ConstantVariable(None)


def _iter_builtin(fn):
    def handler(tx, *args, **kwargs):
        if fn is enumerate:
            start = kwargs.get("start", args[1] if len(args) > 1 else ConstantVariable(0)).as_python_constant()
            return IteratorVariable([TupleVariable([ConstantVariable(i + start), v]) for i, v in enumerate(tx.unpack(args[0]))])
        if fn is zip:
            return IteratorVariable([TupleVariable(list(t)) for t in zip(*(tx.unpack(a) for a in args))])
        if fn is reversed:
            return IteratorVariable(list(reversed(tx.unpack(args[0]))))
        if fn is iter:
            return IteratorVariable(tx.unpack(args[0]))
        if fn is map:
            return IteratorVariable([tx.call_function(args[0], list(t), {}) for t in zip(*(tx.unpack(a) for a in args[1:]))])
        if fn is filter:
            return IteratorVariable([v for v in tx.unpack(args[1]) if tx.truth(tx.call_function(args[0], [v], {}) if not (args[0].is_python_constant() and args[0].as_python_constant() is None) else v)])
        raise AssertionError(fn)
    return handler


def _seq_ctor(kind):
    def handler(tx, *args):
        items = tx.unpack(args[0]) if args else []
        return ListVariable(items) if kind is list else TupleVariable(items)
    return handler


def _dict_ctor(cls):
    def handler(tx, *args, **kwargs):
        d = DictVariable({}, cls=cls)
        if args:
            if isinstance(args[0], DictVariable):
                d.items.update(args[0].items)
            else:
                for pair in tx.unpack(args[0]):
                    k, v = tx.unpack(pair)
                    d.items[k.as_python_constant()] = v
        d.items.update(kwargs)
        return d
    return handler


def _reduce(fn):
    def handler(tx, *args, **kwargs):
        if fn is sum and len(args) == 2:
            kwargs = {"start": args[1], **kwargs}
            args = args[:1]
        items = tx.unpack(args[0]) if len(args) == 1 else list(args)
        if fn in (min, max) and not kwargs:  # before the constant path, which would specialize a size
            symbolic = sym_min_max(tx, fn, items)
            if symbolic is not None:
                return symbolic
        if all(i.is_python_constant() for i in items) and _all_const([], kwargs):
            _, k = _consts([], kwargs)
            return tx.wrap(fn([i.as_python_constant() for i in items], **k), None)
        if fn is sum:
            acc = kwargs.get("start", args[1] if len(args) > 1 else ConstantVariable(0))
            for i in items:
                acc = binary_op(tx, operator.add, acc, i)
            return acc
        raise Unsupported(f"{fn.__name__}() over values not known at capture time")
    return handler


def _bool(tx, x=None):
    return ConstantVariable(False if x is None else tx.truth(x))


def _numeric(cls):
    def handler(tx, *args, **kwargs):
        if _all_const(args, kwargs):
            a, k = _consts(args, kwargs)
            return ConstantVariable(cls(*a, **k))
        raise Unsupported(f"{cls.__name__}() of a value not known at capture time (e.g. a tensor)",
                          "keep tensor values as tensors inside the captured function")
    return handler


def _abs(tx, x):
    if isinstance(x, TensorVariable):
        return tx.out.call_tensor_op(tx, "call_function", torch.abs, [x], {})
    return ConstantVariable(abs(x.as_python_constant()))


def _type(tx, x):
    return ConstantVariable(x.python_type())


def _super(tx, *args):
    if args:
        return SuperVariable(args[0].as_python_constant(), args[1])
    return tx.zero_arg_super()


def _callable(tx, x):
    real = x.real_value()
    if real is not NO_REAL:
        return ConstantVariable(callable(real))
    return ConstantVariable(isinstance(x, (UserFunctionVariable, PartialVariable)) or callable(x.python_type()))


def _next(tx, it, *default):
    if not isinstance(it, IteratorVariable):
        raise Unsupported("next() on a non-iterator")
    v = it.next()
    if v is None:
        if default:
            return default[0]
        raise Unsupported("next() on an exhausted iterator (StopIteration)")
    return v


def _id(tx, x):
    real = x.real_value()
    # a value built during capture has no object yet: the tracker's identity stands in for it
    return ConstantVariable(id(x) if real is NO_REAL else id(real))


def _partial(tx, fn, *args, **kwargs):
    return PartialVariable(fn, args, kwargs)


def _any_all(fn):
    def handler(tx, x):
        return ConstantVariable(fn(tx.truth(i) for i in tx.unpack(x)))
    return handler


def _sorted(tx, x, **kwargs):
    items = tx.unpack(x)
    _, k = _consts([], kwargs)
    return ListVariable([ConstantVariable(v) for v in sorted((i.as_python_constant() for i in items), **k)])


def _issubclass(tx, a, b):
    return ConstantVariable(issubclass(a.as_python_constant(), b.as_python_constant()))


def _isinstance_check(tx, x):
    return ConstantVariable(isinstance(x, TensorVariable))


def _vars(tx, x):
    return tx.getattr(x, "__dict__")


_BUILTIN_HANDLERS = {
    vars: _vars,
    len: _len, isinstance: _isinstance, issubclass: _issubclass, getattr: _getattr, hasattr: _hasattr, setattr: _setattr,
    enumerate: _iter_builtin(enumerate), zip: _iter_builtin(zip), reversed: _iter_builtin(reversed),
    iter: _iter_builtin(iter), map: _iter_builtin(map), filter: _iter_builtin(filter),
    list: _seq_ctor(list), tuple: _seq_ctor(tuple), dict: _dict_ctor(dict),
    min: _reduce(min), max: _reduce(max), sum: _reduce(sum), any: _any_all(any), all: _any_all(all),
    bool: _bool, int: _numeric(int), float: _numeric(float), abs: _abs, type: _type, super: _super,
    callable: _callable, next: _next, id: _id, functools.partial: _partial, sorted: _sorted,
    torch.is_tensor: _isinstance_check,
}
# code asking "am I being compiled?" takes its compile-friendly path under capture
def _answer(value):
    def handler(tx, *args, **kwargs):
        return ConstantVariable(value)
    return handler


for _name, _value in (("is_compiling", True), ("is_dynamo_compiling", True), ("is_exporting", False)):
    _f = getattr(torch.compiler, _name, None)
    if _f is not None:
        _BUILTIN_HANDLERS[_f] = _answer(_value)
_BUILTIN_HANDLERS[collections.OrderedDict] = _dict_ctor(collections.OrderedDict)
