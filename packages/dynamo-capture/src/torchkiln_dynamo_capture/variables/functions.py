"""User functions and methods (inlined), partials, closure cells, super(), the descriptor protocol."""

from __future__ import annotations

import functools
import inspect
import types

from .._sources import AttrSource, ItemSource, closure_cell_source, default_source
from ..exc import Unsupported
from ..trace_rules import is_stdlib
from .base import NO_REAL, AttrMissing, ConstantVariable, VariableTracker
from .containers import TupleVariable


class UserFunctionVariable(VariableTracker):
    """A Python function whose bytecode is inlined into the caller's graph.

    ``fn`` is the real function when there is one; functions made during capture (MAKE_FUNCTION)
    carry their code, defaults and closure cells instead. ``self_var`` makes it a bound method.
    """

    def __init__(
        self,
        code,
        f_globals,
        *,
        fn=None,
        defaults=(),
        kwdefaults=None,
        closure=(),
        self_var=None,
        source=None,
        name=None,
        by_code=False,
    ):
        self.code = code
        #: guarded by its code, not its identity (a nested function, a new object each call):
        #: ``fn`` is the object seen at capture time only, the run function reaches it by ``source``
        self.by_code = by_code
        self.f_globals = f_globals
        self.fn = fn
        self.defaults = list(defaults)
        self.kwdefaults = dict(kwdefaults or {})
        self.closure = list(closure)
        self.self_var = self_var
        self.source = source
        self.name = name or code.co_name
        #: the function ``functools.wraps`` copied metadata from (a wrapper made in the frame)
        self.wrapped = None

    def truth(self, tx) -> bool:
        return True  # a function (or bound method) is always true: ``if validator:``

    @classmethod
    def from_function(cls, tx, fn: types.FunctionType, source=None, self_var=None, by_code=False):
        defaults = [
            tx.wrap(d, default_source(source, i) if source else None)
            for i, d in enumerate(fn.__defaults__ or ())
        ]
        kwdefaults = {
            k: tx.wrap(v, ItemSource(AttrSource(source, "__kwdefaults__"), k) if source else None)
            for k, v in (fn.__kwdefaults__ or {}).items()
        }
        closure = [
            RealCellVariable(
                c,
                closure_cell_source(source, i) if source else None,
                ItemSource(AttrSource(source, "__closure__"), i) if source else None,
            )
            for i, c in enumerate(fn.__closure__ or ())
        ]
        return cls(
            fn.__code__,
            fn.__globals__,
            fn=fn,
            defaults=defaults,
            kwdefaults=kwdefaults,
            closure=closure,
            self_var=self_var,
            source=source,
            name=fn.__qualname__,
            by_code=by_code,
        )

    def bind(self, self_var):
        bound = UserFunctionVariable(
            self.code,
            self.f_globals,
            fn=self.fn,
            defaults=self.defaults,
            kwdefaults=self.kwdefaults,
            closure=self.closure,
            self_var=self_var,
            name=self.name,
            by_code=self.by_code,
            source=self.source if self.by_code else None,
        )
        bound.wrapped = self.wrapped
        return bound

    def python_type(self):
        return types.MethodType if self.self_var is not None else types.FunctionType

    def real_value(self):
        if self.fn is None or self.by_code:
            return NO_REAL
        if self.self_var is None:
            return self.fn
        owner = self.self_var.real_value()
        return NO_REAL if owner is NO_REAL else types.MethodType(self.fn, owner)

    def var_getattr(self, tx, name):
        if self.self_var is not None and name in ("__func__", "__self__"):
            # a bound method's function and object (the ``kernels`` package reads
            # ``module.forward.__func__``)
            return self.self_var if name == "__self__" else self.bind(None)
        if self.wrapped is not None and name in WRAPPER_ASSIGNED:
            return self.wrapped if name == "__wrapped__" else tx.getattr(self.wrapped, name)
        if self.fn is not None and hasattr(self.fn, name):
            return tx.wrap(
                getattr(self.fn, name), AttrSource(self.source, name) if self.source else None
            )
        if name == "__name__":
            return ConstantVariable(self.code.co_name)
        if name == "__qualname__":
            return ConstantVariable(
                self.code.co_qualname if hasattr(self.code, "co_qualname") else self.code.co_name
            )
        if name == "__module__":
            return ConstantVariable(self.f_globals.get("__name__"))
        if name == "__doc__":
            doc = (
                self.code.co_consts[0]
                if self.code.co_consts and isinstance(self.code.co_consts[0], str)
                else None
            )
            return ConstantVariable(doc)
        raise AttrMissing(name)

    def call(self, tx, args, kwargs):
        if self.self_var is not None:
            args = [self.self_var, *args]
        return tx.inline_call(self, args, kwargs)

    def __repr__(self):
        return f"UserFunctionVariable({self.name})"


#: functools.wraps and update_wrapper (inlined they would set attributes on a function that
#: exists only symbolically): see ``wraps_call``
WRAPS_FUNCTIONS = (functools.wraps, functools.update_wrapper)
#: what functools.wraps copies, plus the link it adds
WRAPPER_ASSIGNED = frozenset({*functools.WRAPPER_ASSIGNMENTS, "__wrapped__"})


class WrapsVariable(VariableTracker):
    """``functools.wraps(wrapped)``: applied to a wrapper made in the frame, it records
    ``wrapped`` on it (reads of ``__name__``, ``__doc__``, ``__wrapped__``, ... answer from it)
    instead of running update_wrapper on an object that exists only symbolically."""

    def __init__(self, wrapped: VariableTracker):
        self.wrapped = wrapped

    def call(self, tx, args, kwargs):
        if len(args) != 1 or kwargs:
            raise Unsupported("functools.wraps(...) applied to other than one function")
        return apply_wraps(args[0], self.wrapped)


def wraps_call(fn, args: list, kwargs: dict) -> VariableTracker | None:
    """``functools.wraps(f)`` / ``functools.update_wrapper(w, f)`` over functions made in the
    frame (None: not that call, or real functions, which update_wrapper handles when inlined)."""
    if fn is functools.wraps and len(args) == 1 and not kwargs:
        return WrapsVariable(args[0])
    if fn is functools.update_wrapper and len(args) == 2 and not kwargs:
        return apply_wraps(args[0], args[1])
    return None


def apply_wraps(wrapper: VariableTracker, wrapped: VariableTracker) -> VariableTracker:
    if not isinstance(wrapper, UserFunctionVariable):
        raise Unsupported(f"functools.wraps on a {type(wrapper).__name__}")
    if wrapper.fn is not None and not wrapper.by_code:
        # a function that outlives the frame: its attributes must really change
        raise Unsupported(
            "functools.wraps / update_wrapper on a function made outside the frame",
            "it runs in Python between two graphs",
        )
    wrapper.wrapped = wrapped
    return wrapper


class PartialVariable(VariableTracker):
    """``functools.partial(func, *args, **kwargs)``."""

    def __init__(self, func, args, kwargs, source=None):
        self.func, self.args, self.kwargs, self.source = func, list(args), dict(kwargs), source

    def call(self, tx, args, kwargs):
        return tx.call_function(self.func, [*self.args, *args], {**self.kwargs, **kwargs})

    def var_getattr(self, tx, name):
        if name == "func":
            return self.func
        if name == "args":
            return TupleVariable(self.args)
        raise AttrMissing(name)


class NewCellVariable(VariableTracker):
    """A closure cell created during capture (a cellvar of an inlined frame)."""

    def __init__(self, contents=None):
        self.contents = contents

    def get(self, tx):
        if self.contents is None:
            raise Unsupported("reading a free variable before assignment")
        return self.contents

    def set(self, tx, value):
        self.contents = value


class RealCellVariable(VariableTracker):
    """A real closure cell; stores are recorded as side effects and replayed.

    ``source`` reaches the cell's contents (for guards); ``cell_source``, when set, reaches the cell
    itself: a continuation gets its frame's cells as arguments, a new cell each call, so the run
    function must not hold the one seen at capture time.
    """

    def __init__(self, cell: types.CellType, source=None, cell_source=None):
        self.cell = cell
        self.source = source
        self.cell_source = cell_source

    def get(self, tx):
        pending = tx.out.side_effects.cell_value(self.cell)
        if pending is not None:
            return pending
        try:
            v = self.cell.cell_contents
        except ValueError as e:
            raise Unsupported("reading an empty closure cell") from e
        return tx.wrap(v, self.source)

    def set(self, tx, value):
        tx.out.side_effects.store_cell(self, value)


class SuperVariable(VariableTracker):
    """``super(cls, obj)``: attribute lookup starts after ``cls`` in ``type(obj).__mro__``."""

    def __init__(self, cls: type, obj: VariableTracker):
        self.cls, self.obj = cls, obj

    def var_getattr(self, tx, name):
        owner = getattr(self.obj, "value", None)
        if isinstance(self.obj, ConstantVariable) and isinstance(owner, type):
            return self._class_getattr(tx, owner, name)
        mro = self.obj.python_type().__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else 1
        for k in mro[start:]:
            if name in k.__dict__:
                return wrap_descriptor(tx, self.obj, k.__dict__[name], name, None)
        raise AttrMissing(name)

    def _class_getattr(self, tx, owner: type, name: str):
        """``super()`` in a classmethod (``super(cls, cls)``): the next class in the class's own
        MRO; a classmethod binds to the class, a function comes back unbound."""
        mro = owner.__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else 1
        for k in mro[start:]:
            if name in k.__dict__:
                attr = k.__dict__[name]
                if isinstance(attr, classmethod):
                    return UserFunctionVariable.from_function(
                        tx, attr.__func__, None, self_var=self.obj
                    )
                if isinstance(attr, staticmethod):
                    return tx.wrap(attr.__func__, None)
                if isinstance(attr, types.ClassMethodDescriptorType):
                    # a classmethod of a C type (``torch._C._FunctionBase.apply``, which
                    # ``autograd.Function.apply`` reaches through super()): bound to the class,
                    # as Python binds it; unbound, a call passed its first argument as the class
                    return tx.wrap(attr.__get__(None, owner), None)
                return tx.wrap(attr, None)
        raise AttrMissing(name)


class NoOpVariable(VariableTracker):
    """A call known to do nothing observable (``object.__init__`` on a new object)."""

    def call(self, tx, args, kwargs):
        return ConstantVariable(None)


class RawSetattrVariable(VariableTracker):
    """``object.__setattr__`` bound to an object capture tracks (``super().__setattr__`` in a
    class's own ``__setattr__``): the store itself, past any ``__setattr__`` override."""

    def __init__(self, obj: VariableTracker):
        self.obj = obj

    def call(self, tx, args, kwargs):
        if len(args) != 2 or kwargs:
            raise Unsupported("object.__setattr__ called with other than a name and a value")
        self.obj.raw_store_attr(tx, args[0].as_python_constant(), args[1])
        return ConstantVariable(None)


class RawGetattributeVariable(VariableTracker):
    """``object.__getattribute__`` bound to an object built during capture
    (``super().__getattribute__`` in its class's own ``__getattribute__``): the lookup itself."""

    def __init__(self, obj: VariableTracker):
        self.obj = obj

    def call(self, tx, args, kwargs):
        if len(args) != 1 or kwargs:
            raise Unsupported("object.__getattribute__ called with other than a name")
        return self.obj.raw_getattr(tx, args[0].as_python_constant())


def wrap_descriptor(tx, obj: VariableTracker, attr, name: str, source) -> VariableTracker:
    """Apply the descriptor protocol symbolically for a class attribute found on ``type(obj)``."""
    if attr is object.__init__:
        return NoOpVariable()
    if attr is object.__setattr__ and hasattr(obj, "raw_store_attr"):
        return RawSetattrVariable(obj)
    if attr is object.__getattribute__ and hasattr(obj, "raw_getattr"):
        return RawGetattributeVariable(obj)
    if isinstance(attr, staticmethod):
        return tx.wrap(attr.__func__, None)
    if isinstance(attr, classmethod):
        return UserFunctionVariable.from_function(
            tx, attr.__func__, None, self_var=ConstantVariable(obj.python_type())
        )
    if isinstance(attr, property):
        if attr.fget is None:
            raise AttrMissing(name)
        try:
            return tx.call_function(tx.wrap(attr.fget, None), [obj], {})
        except Unsupported as e:
            if e.in_callee:  # the outermost read wins: the one in the frame that is split
                e.property_read = (tx, name, attr.fget)
            raise
    if isinstance(attr, functools.cached_property) and hasattr(obj, "store_attr"):
        # computed once, then an instance attribute (reads find it before this descriptor)
        value = tx.call_function(tx.wrap(attr.func, None), [obj], {})
        obj.store_attr(tx, attr.attrname or name, value)
        return value
    if isinstance(attr, types.FunctionType):
        if is_stdlib(attr) and obj.real_value() is not NO_REAL:  # e.g. os.environ.get: run for real
            return ConstantVariable(attr.__get__(obj.real_value()))
        return UserFunctionVariable.from_function(tx, attr, None, self_var=obj)
    if isinstance(
        attr, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType)
    ):
        real = obj.real_value()
        if real is NO_REAL:
            raise Unsupported(
                f"builtin method {name!r} of a {obj.python_type().__name__} built during capture"
            )
        # bind this very descriptor (super() may have skipped an override of the same name); a
        # new bound object per call: run code reads it from the object again (its source)
        src = AttrSource(obj.source, name) if obj.source is not None and source is None else source
        return tx.wrap(attr.__get__(real, type(real)), src)
    if (
        hasattr(attr, "__get__")
        and not isinstance(attr, (type, types.ModuleType))
        and (inspect.ismethoddescriptor(attr) or inspect.isdatadescriptor(attr))
    ):
        real = obj.real_value()
        if real is NO_REAL:
            raise Unsupported(f"descriptor {name!r}")
        return tx.wrap(getattr(real, name), source)
    return tx.wrap(attr, source)


def class_attr(cls: type, name: str):
    """The attribute ``name`` found on ``cls``'s MRO (not through the descriptor protocol), or None."""
    for k in cls.__mro__:
        if name in k.__dict__:
            return k.__dict__[name]
    return None


def is_data_descriptor(attr) -> bool:
    """A property or another descriptor with ``__set__`` (it wins over the instance dict);
    ``__slots__`` members are plain storage here."""
    return (
        attr is not None
        and type(attr).__name__ != "member_descriptor"
        and (isinstance(attr, property) or inspect.isdatadescriptor(attr))
    )


def store_through_descriptor(tx, obj: VariableTracker, cls: type, name: str, value) -> bool:
    """``obj.name = value`` when ``cls`` has a data descriptor for ``name``: a property's setter
    is inlined (so later reads inside the graph see what it stored); True when handled."""
    attr = class_attr(cls, name)
    if not is_data_descriptor(attr):
        return False
    if isinstance(attr, property):
        if attr.fset is None:
            raise Unsupported(
                f"setting {name!r}, a property without a setter (eager raises AttributeError)",
                "it runs in Python, which raises eager's error",
            )
        tx.call_function(tx.wrap(attr.fset, None), [obj, value], {})
        return True
    raise Unsupported(f"setting {name!r} through a {type(attr).__name__} descriptor")


def wrap_class_attr(tx, obj: VariableTracker, cls: type, name: str) -> VariableTracker:
    for k in cls.__mro__:
        if name in k.__dict__:
            return wrap_descriptor(tx, obj, k.__dict__[name], name, None)
    raise AttrMissing(name)
