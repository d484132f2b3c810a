"""Python code that rebuilds, after the graph ran, the values capture tracked symbolically.

Used for the return value, the replayed side effects and, at a graph break, the live stack and
locals handed to the step function. Values with a source are read back from it (so identity is
kept: a list the caller passed in is the same list afterwards); containers built during capture
are built once per ``run`` (two references to one list stay one list).
"""

from __future__ import annotations

import functools
import types

from ._codegen import Namespace
from ._sources import LocalSource, source_code
from .exc import Unsupported
from .variables.base import BoundMethodVariable, ConstantVariable
from .variables.containers import (
    DictVariable,
    DictViewVariable,
    IteratorVariable,
    ListVariable,
    TupleVariable,
)
from .variables.ctx import ContextExitVariable
from .variables.functions import (
    NewCellVariable,
    PartialVariable,
    RealCellVariable,
    UserFunctionVariable,
)
from .variables.modules import NewModuleVariable
from .variables.objects import DataclassVariable, NewObjectVariable, UserObjectVariable
from .variables.symbolic import SymNodeVariable
from .variables.tensors import TensorVariable

_SIMPLE = (int, float, bool, str, type(None))


def _bound_to_an_object(value) -> bool:
    """A builtin method bound to an object (``a.mean`` of an array argument), not to a module
    or a class: each call's object has its own."""
    owner = getattr(value, "__self__", None)
    return (
        isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType, types.MethodType))
        and owner is not None
        and not isinstance(owner, (types.ModuleType, type))
    )


def _new_object(cls, attrs):
    obj = cls.__new__(cls)
    obj.__dict__.update(attrs)
    return obj


class Reconstructor:
    """Writes expressions over ``run``'s namespace; graph outputs it needs are collected in order."""

    def __init__(self, ns: Namespace, symbols: dict | None = None, as_tensor=None) -> None:
        self.ns = ns
        self.symbols = (
            symbols or {}
        )  # size symbol -> (input source, dim[, "value"]), for symbolic ints
        #: an unbacked value (``.item()``) as a 0-d tensor output of the graph, read back with .item()
        self.as_tensor = as_tensor
        self._scalars: dict[int, str] = {}
        ns.values.setdefault("_new_object", _new_object)
        self.outputs: list[TensorVariable] = []
        self._out_index: dict[int, int] = {}
        self.body: list[str] = []  # statements, in order (memoised containers are assigned here)
        self._memo: dict[int, str] = {}
        #: input sizes and int inputs that rebuilt values are computed from, read once at the start
        #: of ``run`` (code -> name): the side effects replayed first may rebind their source (an
        #: int attribute bumped, a cache tensor replaced), the values are those of the call's start
        self.entry_reads: dict[str, str] = {}

    def emit(self, line: str) -> None:
        self.body.append(line)

    def expr(self, v) -> str:
        ns = self.ns
        if isinstance(v, SymNodeVariable):
            if v.unbacked:
                if self.as_tensor is None:
                    raise Unsupported("returning a value read from a tensor (.item())")
                if id(v) not in self._scalars:
                    self._scalars[id(v)] = f"{self.expr(self.as_tensor(v))}.item()"
                return self._scalars[id(v)]
            return self._size_expr(v.value.node.expr)
        if isinstance(v, TensorVariable):
            if v.source is not None:
                # an input tensor reached through an object may be replaced there by the side
                # effects replayed first (``old = box.t; box.t = new; return old``): read it at entry
                code = source_code(v.source, ns)
                return (
                    code
                    if isinstance(v.source, LocalSource)
                    else self.entry_reads.setdefault(code, f"__entry{len(self.entry_reads)}")
                )
            if getattr(v, "constant", None) is not None:
                return ns.ref(v.constant)
            if id(v) not in self._out_index:
                self._out_index[id(v)] = len(self.outputs)
                self.outputs.append(v)
            return f"__o[{self._out_index[id(v)]}]"
        if isinstance(v, ConstantVariable):
            if v.source is not None and (
                isinstance(v.value, (set, list, dict))
                or type(getattr(v.value, "__self__", None)) in (set, list, dict)
                or _bound_to_an_object(v.value)
            ):
                # the object itself (or its bound method), not capture's copy of it (nor the
                # method bound to the object the first call passed)
                return source_code(v.source, ns)
            return (
                repr(v.value)
                if type(v.value) in _SIMPLE and v.value == v.value
                else ns.ref(v.value)
            )
        if isinstance(v, TupleVariable):
            body = "".join(self.expr(i) + ", " for i in v.items)
            if v.cls is tuple:
                return f"({body})"
            if hasattr(v.cls, "_fields"):
                return f"{ns.ref(v.cls)}({body})"
            return f"{ns.ref(v.cls)}(({body}))"
        if isinstance(v, (ListVariable, DictVariable, NewObjectVariable, DataclassVariable)):
            if getattr(v, "source", None) is not None:
                return source_code(v.source, ns)
            if getattr(v, "dict_of", None) is not None:
                return f"{self.expr(v.dict_of)}.__dict__"  # an object's own, not a copy of it
            return self._memoised(v)
        if isinstance(v, NewModuleVariable):
            return self._memoised(v)  # a module of this call's own, as eager makes
        if isinstance(v, UserObjectVariable):
            return source_code(v.source, ns) if v.source is not None else ns.ref(v.value)
        if isinstance(v, UserFunctionVariable) and v.by_code:
            fn = source_code(v.source, ns)
            if v.self_var is None:
                return fn
            return f"{ns.ref(types.MethodType, 'MethodType')}({fn}, {self.expr(v.self_var)})"
        if isinstance(v, UserFunctionVariable) and v.fn is not None:
            if v.self_var is None:
                return ns.ref(v.fn)
            return (
                f"{ns.ref(types.MethodType, 'MethodType')}({ns.ref(v.fn)}, {self.expr(v.self_var)})"
            )
        if isinstance(v, UserFunctionVariable):
            fn = self._memoised(v)
            if v.self_var is None:
                return fn
            return f"{ns.ref(types.MethodType, 'MethodType')}({fn}, {self.expr(v.self_var)})"
        if isinstance(v, (NewCellVariable, RealCellVariable)):
            return self._memoised(v)
        if isinstance(v, BoundMethodVariable):
            return f"getattr({self.expr(v.obj)}, {v.name!r})"
        if isinstance(v, PartialVariable):
            args = "".join(self.expr(a) + ", " for a in v.args)
            kwargs = "".join(f"{k}={self.expr(a)}, " for k, a in v.kwargs.items())
            return f"{ns.ref(functools.partial, 'partial')}({self.expr(v.func)}, {args}{kwargs})"
        if isinstance(v, DictViewVariable):
            return f"{self.expr(v.dict_var)}.{v.kind}()"
        if isinstance(v, IteratorVariable):
            return "iter((" + "".join(self.expr(i) + ", " for i in v.items[v.pos :]) + "))"
        if isinstance(v, ContextExitVariable) and v.real_exit is not None:
            return ns.ref(v.real_exit, "exit")
        if hasattr(v, "reconstruct"):  # a tracker that knows its own expression (Triton launches)
            return v.reconstruct(self)
        raise Unsupported(f"returning or storing a {type(v).__name__} built during capture")

    def _size_expr(self, expr) -> str:
        """A symbolic size handed back to Python, computed from the inputs' sizes at run time."""
        if expr.is_Integer:
            return str(int(expr))
        if expr.is_Symbol:
            src, dim, *kind = self.symbols[expr]
            if kind == ["value"]:  # an int input of symbolic value: the int itself
                code = source_code(src, self.ns)
            else:
                code = f"{source_code(src, self.ns)}.size({dim})"
            return self.entry_reads.setdefault(code, f"__entry{len(self.entry_reads)}")
        args = [self._size_expr(a) for a in expr.args]
        name = type(expr).__name__
        if expr.is_Add:
            return "(" + " + ".join(args) + ")"
        if expr.is_Mul:
            return "(" + " * ".join(args) + ")"
        if name in ("FloorDiv", "CleanDiv"):
            return f"({args[0]} // {args[1]})"
        if name in ("PythonMod", "Mod"):
            return f"({args[0]} % {args[1]})"
        if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
            return f"({args[0]} ** {args[1]})"
        raise Unsupported(f"internal: no Python for the size expression {expr}")

    def contents(self, v) -> str:
        """A fresh container holding ``v``'s items (for rewriting a mutated outside container)."""
        if isinstance(v, ListVariable):
            return "[" + ", ".join(self.expr(i) for i in v.items) + "]"
        return self._dict_literal(v)

    def iter_items(self, v) -> str:
        """The tuple an iterator slot is passed as (the continuation's prologue calls iter on it)."""
        if not isinstance(v, IteratorVariable):
            raise Unsupported(f"an iterator slot holding a {type(v).__name__}")
        return "(" + "".join(self.expr(i) + ", " for i in v.items[v.pos :]) + ")"

    def _dict_literal(self, v) -> str:
        ns = self.ns
        return (
            "{"
            + ", ".join(
                f"{ns.ref(k) if type(k) not in _SIMPLE else repr(k)}: {self.expr(x)}"
                for k, x in v.items.items()
            )
            + "}"
        )

    def _memoised(self, v) -> str:
        name = self._memo.get(id(v))
        if name is not None:
            return name
        ns = self.ns
        name = f"__v{len(self._memo)}"
        self._memo[id(v)] = name
        if isinstance(v, ListVariable):
            # built empty first, so an item referring back to the list sees the same object
            self.emit(f"{name} = []")
            self.emit(f"{name}.extend([{', '.join(self.expr(i) for i in v.items)}])")
        elif isinstance(v, DictVariable):
            body = self._dict_literal(v)
            self.emit(f"{name} = {body}" if v.cls is dict else f"{name} = {ns.ref(v.cls)}({body})")
        elif isinstance(v, UserFunctionVariable):
            # a function made during capture (lambda, closure, comprehension): the same code,
            # globals, defaults and cells, built once per run
            defaults = (
                "(" + "".join(self.expr(d) + ", " for d in v.defaults) + ")"
                if v.defaults
                else "None"
            )
            closure = (
                "(" + "".join(self.expr(c) + ", " for c in v.closure) + ")" if v.closure else "None"
            )
            self.emit(
                f"{name} = {ns.ref(types.FunctionType, 'FunctionType')}({ns.ref(v.code, 'code')}, "
                f"{ns.ref(v.f_globals, 'globals')}, {v.code.co_name!r}, {defaults}, {closure})"
            )
            if v.kwdefaults:
                kw = ", ".join(f"{k!r}: {self.expr(x)}" for k, x in v.kwdefaults.items())
                self.emit(f"{name}.__kwdefaults__ = {{{kw}}}")
        elif isinstance(v, RealCellVariable):
            cell = (
                source_code(v.cell_source, ns)
                if v.cell_source is not None
                else ns.ref(v.cell, "cell")
            )
            self.emit(f"{name} = {cell}")
        elif isinstance(v, NewCellVariable):
            # a cell of the captured frame, made here with its contents now; a graph break hands
            # this same cell object to the continuation (see bytecode/resume.py)
            contents = "" if v.contents is None else self.expr(v.contents)
            self.emit(f"{name} = {ns.ref(types.CellType, 'CellType')}({contents})")
        elif isinstance(v, NewModuleVariable):
            self.emit(
                f"{name} = {ns.ref(type(v.value))}(*{ns.ref(v.ctor_args, 'args')}, "
                f"**{ns.ref(v.ctor_kwargs, 'kwargs')})"
            )
        elif isinstance(v, DataclassVariable) and v.rebuilt_by_init:
            fields = ", ".join(f"{k}={self.expr(x)}" for k, x in v.fields.items())
            self.emit(f"{name} = {ns.ref(v.cls)}({fields})")
        elif isinstance(v, DataclassVariable):  # __post_init__ already ran during capture
            fields = ", ".join(f"{k!r}: {self.expr(x)}" for k, x in v.fields.items())
            self.emit(f"{name} = _new_object({ns.ref(v.cls)}, {{{fields}}})")
        else:
            attrs = ", ".join(f"{k!r}: {self.expr(x)}" for k, x in v.attrs.items())
            self.emit(f"{name} = _new_object({ns.ref(v.cls)}, {{{attrs}}})")
        return name
