"""nn.Module instances: parameters and buffers become get_attr nodes, forward and hooks are inlined.

Distributed wrappers are the exception (``trace_rules.runs_in_python``): their forward and hooks
talk to a process group and a gradient reducer, which must run on every call, not once at capture.
"""

from __future__ import annotations

import torch
from torch.nn.modules import module as _nn_module
from torchkiln_guards import LengthMatch, ModuleHooksMatch

from .._guards import ChildModulesMatch, SubmoduleHooksMatch
from .._sources import AttrSource, HeldObjectSource, LocalSource
from ..exc import Unsupported
from ..trace_rules import runs_in_python
from .base import AttrMissing, BoundMethodVariable, ConstantVariable
from .containers import DictVariable, IteratorVariable, TupleVariable
from .objects import UserObjectVariable

#: the hook dicts nn.Module.__call__ reads, on the module and process-wide (register_module_forward_hook,
#: register_module_forward_pre_hook, register_module_full_backward_hook, ...)
_OWN_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
#: every process-wide dict of hook state (the hooks, and which take kwargs or always run)
_GLOBAL_HOOK_STATE = tuple(n for n in vars(_nn_module) if n.startswith("_global_") and "hook" in n)
_GLOBAL_HOOK_DICTS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)


class NNModuleVariable(UserObjectVariable):
    """A module from outside the captured function (identity-guarded through its source)."""

    _ITERATORS = (
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
    )

    def var_getattr(self, tx, name):
        if name in self._ITERATORS and name not in self.value.__dict__:
            return BoundMethodVariable(self, name)
        pending = tx.out.side_effects.attr_value(self.value, name)
        if pending is not None:
            return pending
        m = self.value
        d = m.__dict__
        if name in d:
            return tx.wrap(d[name], self._src(name))
        for table in ("_parameters", "_buffers"):
            t = d.get(table)
            if t is not None and name in t:
                v = t[name]
                return (
                    ConstantVariable(None)
                    if v is None
                    else tx.out.wrap_module_tensor(tx, v, self._src(name))
                )
        mods = d.get("_modules")
        if mods is not None and name in mods:
            sub = mods[name]
            _guard_child(tx, mods, name, sub, self.source)
            return (
                ConstantVariable(None)
                if sub is None
                else tx.wrap(sub, _child_src(sub, self.source, name))
            )
        if not any(name in k.__dict__ for k in type(m).__mro__):
            raise AttrMissing(name)  # Module.__getattr__ would raise AttributeError
        return super().var_getattr(tx, name)

    def store_attr(self, tx, name, value):
        if name in self.value._parameters or name in self.value._modules:
            raise Unsupported(f"assigning module attribute {name!r} inside a captured forward")
        super().store_attr(tx, name, value)

    def call(self, tx, args, kwargs):
        m = self.value
        why = runs_in_python(m)
        if why is not None:
            # the caller breaks at this call and CPython makes it: the wrapper's own machinery runs
            # for real, and the module it wraps has its forward captured (CaptureContext.module_callee)
            err = Unsupported(
                f"calling a {type(m).__name__}: {why}",
                "it runs in Python; the forward of the module it wraps is captured as its own frame",
            )
            err.in_callee = True
            raise err
        where = self.source.expr() if self.source is not None else type(m).__name__
        # guarded before any decision below: registering or removing a hook (the module's own or a
        # global one) later must recompile, whether this call is inlined or breaks
        if isinstance(self.source, LocalSource):
            tx.out.guards.append(ModuleHooksMatch(self.source, m))  # covers the global dicts too
        else:
            own = [(getattr(m, n), f"{where}.{n}") for n in _OWN_HOOK_DICTS]
            dicts, labels = zip(
                *(
                    own
                    + [
                        (getattr(_nn_module, n), f"torch.nn.modules.module.{n}")
                        for n in _GLOBAL_HOOK_DICTS
                    ]
                )
            )
            tx.out.guards.append(SubmoduleHooksMatch.of(dicts, "\n".join(labels)))
        _refuse_changed_hooks(tx, m, where)
        if (
            m._backward_hooks
            or m._backward_pre_hooks
            or _nn_module._global_backward_hooks
            or _nn_module._global_backward_pre_hooks
        ):
            # nn.Module.__call__ wraps the inputs and outputs in BackwardHook nodes the graph has no
            # way to express: the module runs in Python, where its backward hooks fire on backward
            raise Unsupported(
                f"calling {type(m).__name__} ({where}) with backward hooks (register_full_backward_hook "
                "or a global one)",
                "the module call runs eagerly so its backward hooks fire",
            )
        # nn.Module.__call__'s order: global hooks first, then the module's own; a global hook may be
        # a kwargs hook only for forward hooks (pre-hooks check the module's own kwargs set only)
        pre = [
            (i, h, f"torch.nn.modules.module._global_forward_pre_hooks[{i}]")
            for i, h in _nn_module._global_forward_pre_hooks.items()
        ]
        pre += [(i, h, f"{where}._forward_pre_hooks[{i}]") for i, h in m._forward_pre_hooks.items()]
        post = [
            (i, h, f"torch.nn.modules.module._global_forward_hooks[{i}]")
            for i, h in _nn_module._global_forward_hooks.items()
        ]
        post += [(i, h, f"{where}._forward_hooks[{i}]") for i, h in m._forward_hooks.items()]
        for hook_id, hook, hook_where in pre:
            # a source for the hook (held by reference; the hooks guard above pins it): what it
            # reaches through its closure or globals can then be mutated and replayed. A hook that
            # cannot be traced raises Unsupported inside it: the call breaks and nn.Module.__call__
            # runs every hook around the captured forward (CaptureContext.module_callee)
            hook_v = tx.wrap(hook, HeldObjectSource(hook, hook_where))
            if hook_id in m._forward_pre_hooks_with_kwargs:
                res = tx.call_function(hook_v, [self, TupleVariable(args), _dict(kwargs)], {})
                if not (res.is_python_constant() and res.as_python_constant() is None):
                    new_args, new_kwargs = tx.unpack(res)
                    args, kwargs = tx.unpack(new_args), dict(new_kwargs.items)
            else:
                res = tx.call_function(hook_v, [self, TupleVariable(args)], {})
                if not (res.is_python_constant() and res.as_python_constant() is None):
                    args = tx.unpack(res) if isinstance(res, TupleVariable) else [res]
        out = self.var_getattr(tx, "forward").call(tx, args, kwargs)
        for hook_id, hook, hook_where in post:
            hook_v = tx.wrap(hook, HeldObjectSource(hook, hook_where))
            if (
                hook_id in m._forward_hooks_with_kwargs
                or hook_id in _nn_module._global_forward_hooks_with_kwargs
            ):
                res = tx.call_function(hook_v, [self, TupleVariable(args), _dict(kwargs), out], {})
            else:
                res = tx.call_function(hook_v, [self, TupleVariable(args), out], {})
            if not (res.is_python_constant() and res.as_python_constant() is None):
                out = res
        return out

    def submodules(self, tx):
        m = self.value
        if isinstance(m, torch.nn.ModuleDict):
            return [ConstantVariable(k) for k in m]
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            where = self.source.expr() if self.source is not None else type(m).__name__
            tx.out.guards.append(
                LengthMatch(HeldObjectSource(m._modules, f"{where}._modules"), len(m._modules))
            )
            for k, sub in m._modules.items():
                _guard_child(tx, m._modules, k, sub, self.source)
            return [tx.wrap(sub, _child_src(sub, self.source, k)) for k, sub in m._modules.items()]
        if isinstance(m, (torch.nn.ParameterList,)):
            return [
                tx.out.wrap_module_tensor(tx, p, self._src(k)) for k, p in m._parameters.items()
            ]
        raise Unsupported(f"iterating over {type(m).__name__}")

    def unpack(self, tx):
        return self.submodules(tx)

    def call_method(self, tx, name, args, kwargs):
        m = self.value
        if name == "__getitem__" and isinstance(
            m,
            (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict, torch.nn.ParameterList),
        ):
            k = args[0].as_python_constant()
            if isinstance(m, torch.nn.ModuleDict):
                return tx.wrap(m[k], AttrSource(self.source, k) if self.source else None)
            if isinstance(k, slice):
                return tx.wrap(m[k], None)
            keys = (
                list(m._modules)
                if not isinstance(m, torch.nn.ParameterList)
                else list(m._parameters)
            )
            key = keys[k]
            if isinstance(m, torch.nn.ParameterList):
                return tx.out.wrap_module_tensor(tx, m._parameters[key], self._src(key))
            _guard_child(tx, m._modules, key, m._modules[key], self.source)
            return tx.wrap(m._modules[key], _child_src(m._modules[key], self.source, key))
        if name == "__len__":
            return ConstantVariable(len(m))
        if name == "__contains__" and isinstance(m, torch.nn.ModuleDict):
            return ConstantVariable(args[0].as_python_constant() in m)
        if isinstance(m, torch.nn.ModuleDict) and name in ("keys", "values", "items"):
            ks = list(m.keys())
            vals = [tx.wrap(m[k], AttrSource(self.source, k) if self.source else None) for k in ks]
            if name == "keys":
                return TupleVariable([ConstantVariable(k) for k in ks])
            if name == "values":
                return TupleVariable(vals)
            return TupleVariable(
                [TupleVariable([ConstantVariable(k), v]) for k, v in zip(ks, vals)]
            )
        if name in self._ITERATORS:
            a, k = (
                [x.as_python_constant() for x in args],
                {n: v.as_python_constant() for n, v in kwargs.items()},
            )
            items = []
            for entry in getattr(m, name)(*a, **k):
                key, val = entry if name.startswith("named") else (None, entry)
                src = None
                if self.source is not None and key is not None:
                    src = self.source
                    for part in key.split(".") if key else []:
                        src = AttrSource(src, part)
                if isinstance(val, torch.Tensor):
                    v = tx.out.wrap_module_tensor(tx, val, src)
                else:
                    v = tx.wrap(val, None)
                items.append(TupleVariable([ConstantVariable(key), v]) if key is not None else v)
            return IteratorVariable(items)
        try:
            return self.var_getattr(tx, name).call(tx, args, kwargs)
        except AttrMissing as e:
            raise Unsupported(f"{type(m).__name__} has no attribute {name!r}") from e

    def truth(self, tx):
        m = self.value
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict)):
            return len(m) > 0
        return True


class NewModuleVariable(NNModuleVariable):
    """A stateless torch.nn module made during capture (``classes._stateless_module``). Eager
    makes a new one on every call, so the capture-time object must never stand for it at run
    time: handed back to Python (a graph break, a return value) it is made again there from the
    same constant arguments (``_reconstruct``), and a change to it (an attribute, ``train()``, a
    hook) is refused, so that line breaks the graph and runs in Python on that fresh module; a
    change recorded on the capture-time object would be replayed on one shared object by every
    call (hooks piling up, a stale attribute)."""

    def __init__(self, value, ctor_args: tuple, ctor_kwargs: dict) -> None:
        super().__init__(value, None)
        self.ctor_args = ctor_args
        self.ctor_kwargs = ctor_kwargs

    def store_attr(self, tx, name, value):
        raise Unsupported(
            f"changing attribute {name!r} of a {type(self.value).__name__} made inside the "
            "captured function",
            "the module is made again in Python, where the change runs",
        )


def _refuse_changed_hooks(tx, m, where: str) -> None:
    """A hook registered (or removed) earlier in this capture is only a pending change of the
    hook dicts, replayed after the graph: the call below reads the real dicts, so it would run
    without the new hook. The call runs in Python instead, after the change was made."""
    if not tx.out.side_effects.entries:
        return  # nothing changed yet (the common case: no scan)
    dicts = [v for k, v in vars(m).items() if "hook" in k and isinstance(v, dict)]
    dicts += [
        d for d in (getattr(_nn_module, n, None) for n in _GLOBAL_HOOK_STATE) if isinstance(d, dict)
    ]
    for d in dicts:
        var = tx.out.var_cache.get(id(d))
        if var is not None and tx.out.side_effects.is_mutated(var):
            raise Unsupported(
                f"calling {type(m).__name__} ({where}) after its hooks changed in the captured "
                "function",
                "the call runs in Python, with the hooks as they are then",
            )


def _where(parent_source, name: str) -> str:
    return f"{parent_source.expr()}.{name}" if parent_source is not None else name


def _child_src(sub, parent_source, name: str):
    """A submodule is identity-guarded by reference (ChildModulesMatch), so guards on its attributes
    read it directly instead of walking Module.__getattr__ from the root on every call."""
    return HeldObjectSource(sub, _where(parent_source, name))


def _guard_child(tx, modules: dict, name: str, sub, parent_source) -> None:
    if sub is not None:
        tx.out.guards.append(
            ChildModulesMatch(((modules, name, sub, _where(parent_source, name)),))
        )


def _dict(kwargs):
    return DictVariable(kwargs)
