"""The symbolic interpreter: a stack of VariableTrackers, locals, cells; dispatch by opcode.

Handlers are methods named after the (normalised) opcode; each documents its stack effect.
Loops are unrolled and branches on values known at capture time are specialised.
"""

from __future__ import annotations

import builtins
import operator
import types

from torchkiln_guards import GlobalStateMatch

from . import trace_rules
from ._binding import _as_dict, bind_arguments
from ._opcodes_build import BuildingOpcodes
from ._opcodes_flow import ControlFlowOpcodes
from ._sources import GlobalSource, ItemSource, module_global_source
from .breaks import break_point
from .builder import wrap
from .bytecode import decode, version_table
from .exc import Unsupported
from .variables.autograd_function import APPLY, call_apply
from .variables.base import (
    AttrMissing,
    ConstantVariable,
    DeletedVariable,
    NullVariable,
    VariableTracker,
)
from .variables.builtins import _len
from .variables.calls import call_value, disabled_call
from .variables.containers import DictVariable, IteratorVariable, TupleVariable
from .variables.ctx import enter_context
from .variables.functions import (
    WRAPS_FUNCTIONS,
    NewCellVariable,
    SuperVariable,
    UserFunctionVariable,
    wraps_call,
)
from .variables.generators import contextmanager_call, is_contextmanager_helper
from .variables.logging_calls import bound, replay_logging_call
from .variables.modules import NNModuleVariable
from .variables.numpy_arrays import NumpyNdarrayVariable
from .variables.numpy_calls import numpy_operator
from .variables.objects import UserObjectVariable
from .variables.operators import BINARY_OPS, COMPARE_OPS, binary_op, contains, identity
from .variables.symbolic import SymNodeVariable, sym_unary
from .variables.tensors import TensorVariable

_VT = version_table()
_MAX_INSTRUCTIONS = 2_000_000
_MAX_DEPTH = 64


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class StopCapture(Exception):
    """Raised when the top frame reaches the break point it was asked to stop at (a restart)."""


class InstructionTranslator(BuildingOpcodes, ControlFlowOpcodes):
    """Symbolically runs one frame. Inlined calls get a child translator sharing ``out``.

    The opcodes that build and unpack values are in ``_opcodes_build.py``, control flow and
    generators in ``_opcodes_flow.py`` (mixins); the rest are here."""

    def __init__(
        self,
        out,
        code: types.CodeType,
        f_globals: dict,
        localvars: dict,
        cells: dict,
        parent=None,
        func=None,
    ):
        self.out = out
        self.code = code
        self.f_globals = f_globals
        self.locals = localvars
        self.cells = cells
        self.parent = parent
        self.func = func
        self.depth = 0 if parent is None else parent.depth + 1
        self.stack: list[VariableTracker] = []
        self.instructions = decode(code)
        self.ip = 0
        self.kw_names: tuple = ()
        self.lineno = code.co_firstlineno
        self.counter = [0] if parent is None else parent.counter
        #: top frame only: how often each instruction ran (a break point is (index, occurrence)),
        #: and the break point to stop before when capture restarts to split the frame there
        self.exec_counts: dict[int, int] = {}
        self.stop_at: tuple[int, int] | None = None

    # --- helpers used by variables ----------------------------------------------------------------
    def wrap(self, value, source):
        return wrap(self, value, source)

    def getattr(self, obj: VariableTracker, name: str) -> VariableTracker:
        return obj.var_getattr(self, name)

    def getitem(self, obj, key):
        if isinstance(obj, TensorVariable):
            return obj.call_method(self, "__getitem__", [key], {})
        if isinstance(obj, ConstantVariable):
            if isinstance(key, TensorVariable):
                raise Unsupported("indexing a constant with a tensor")
            k = key.as_python_constant()
            return self.wrap(
                obj.value[k], ItemSource(obj.source, k) if obj.source is not None else None
            )
        return obj.call_method(self, "__getitem__", [key], {})

    def unpack(self, obj) -> list:
        return obj.unpack(self)

    def truth(self, obj) -> bool:
        return obj.truth(self)

    def call_function(self, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
        return fn.call(self, args, kwargs)

    def call_value(self, fn, args: list, kwargs: dict) -> VariableTracker:
        """Call a real callable known at capture time (the call policy of ``variables/calls.py``)."""
        return call_value(self, fn, args, kwargs)

    def contains(self, item: VariableTracker, container: VariableTracker) -> bool:
        """``item in container`` (``variables/operators.py``)."""
        return contains(self, item, container)

    def zero_arg_super(self):
        cell = self.cells.get("__class__")
        if cell is None or self.code.co_argcount == 0:
            raise Unsupported("super() outside a method")
        first = self.code.co_varnames[0]
        self_var = self.locals.get(first)
        if self_var is None:  # the first argument may itself live in a cell
            self_var = self.cells[first].get(self)
        return SuperVariable(cell.get(self).as_python_constant(), self_var)

    def inline_call(self, func: UserFunctionVariable, args: list, kwargs: dict) -> VariableTracker:
        code = func.code
        if code is APPLY.__code__ and args:  # a torch.autograd.Function's apply(cls, ...)
            result = call_apply(self, args[0], args[1:], kwargs)
            if result is not None:
                return result
        if code.co_flags & (0x80 | 0x100 | 0x200):
            raise Unsupported(f"calling coroutine {func.name}")
        if func.fn is not None:
            owner = func.self_var.real_value() if func.self_var is not None else None
            if trace_rules.is_reorderable_logging(func.fn, owner):
                return replay_logging_call(
                    self, bound(func.fn, owner), args[1 if owner is not None else 0 :], kwargs
                )
        if trace_rules.is_impure_module(func.f_globals.get("__name__")):
            raise Unsupported(
                f"calling {func.f_globals['__name__']}.{func.name} (it acts outside the program: "
                "output, time, files, ...)",
                "it runs in Python between two graphs",
            )
        if func.fn is not None and trace_rules.is_disabled(func.fn):
            raise disabled_call(func.fn)
        if func.fn is not None and trace_rules.is_allowed_in_graph(func.fn):
            return self.out.call_tensor_op(self, "call_function", func.fn, args, kwargs)
        if is_contextmanager_helper(func) and self.out.trace_contextmanagers:
            return contextmanager_call(self, func, args, kwargs)  # entered by BEFORE_WITH
        if (
            func.fn in WRAPS_FUNCTIONS
            and (wrapped := wraps_call(func.fn, args, kwargs)) is not None
        ):
            return wrapped
        child = self.child_frame(func, args, kwargs)
        try:
            if code.co_flags & 0x20:
                # a generator (genexpr): run it to completion now; its yields become an iterator
                child.yielded = []
                child.run()
                return IteratorVariable(child.yielded)
            return child.run()
        except Unsupported as e:
            e.in_callee = True  # the caller breaks at the call; the callee is captured on its own
            raise

    def child_frame(
        self, func: UserFunctionVariable, args: list, kwargs: dict
    ) -> InstructionTranslator:
        """A translator for ``func``'s frame with its arguments bound, not yet run."""
        if self.depth >= _MAX_DEPTH:
            raise Unsupported(f"inlining depth over {_MAX_DEPTH} (recursion?) at {func.name}")
        code = func.code
        localvars = bind_arguments(func, args, kwargs)
        cells = {}
        for name in code.co_cellvars:
            cells[name] = NewCellVariable(localvars.pop(name, None))
        for name, cell in zip(code.co_freevars, func.closure):
            cells[name] = cell
        return InstructionTranslator(
            self.out, code, func.f_globals, localvars, cells, parent=self, func=func
        )

    # --- the loop ---------------------------------------------------------------------------------
    def run(self) -> VariableTracker:
        insts = self.instructions
        top = self.parent is None
        inst = None
        try:
            while True:
                inst = insts[self.ip]
                if top:
                    n = self.exec_counts.get(self.ip, 0) + 1
                    self.exec_counts[self.ip] = n
                    if self.stop_at == (self.ip, n):
                        raise StopCapture()
                self.ip += 1
                self.lineno = inst.lineno or self.lineno
                self.counter[0] += 1
                if self.counter[0] > _MAX_INSTRUCTIONS:
                    raise Unsupported("capture ran too long (an unbounded loop?)")
                handler = getattr(self, inst.opname, None)
                if handler is None:
                    raise Unsupported(
                        f"opcode {inst.opname}",
                        "this Python construct is not supported inside a captured function",
                    )
                handler(inst)
        except _Return as r:
            return r.value
        except Unsupported as e:
            if top and inst is not None and e.break_point is None:
                read = e.property_read
                getter = read[1:] if read is not None and read[0] is self else None
                e.break_point = break_point(
                    insts, inst.index, self.exec_counts, getattr(e, "in_callee", False), getter
                )
            raise e.located(self.code.co_filename, self.lineno) from None
        except AttrMissing as e:
            if not top and not self.code.co_exceptiontable:
                # an inlined function with no try block raises AttributeError to its caller (a
                # class's own __getattribute__ under hasattr or getattr with a default)
                raise
            err = Unsupported(f"missing attribute {e}").located(self.code.co_filename, self.lineno)
            if top and inst is not None:
                err.break_point = break_point(insts, inst.index, self.exec_counts, False)
            raise err from e

    def push(self, v):
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n):
        if n == 0:
            return []
        vals = self.stack[-n:]
        del self.stack[-n:]
        return vals

    def jump(self, inst):
        self.ip = inst.target

    # --- no-ops and stack shuffles ------------------------------------------------------------------
    def NOP(self, inst):
        pass

    RESUME = COPY_FREE_VARS = NOP

    def PUSH_NULL(self, inst):  # -> NULL
        self.push(NullVariable())

    def POP_TOP(self, inst):  # x ->
        self.pop()

    def END_FOR(self, inst):  # (3.12) iter, x ->
        self.popn(2)

    def COPY(self, inst):  # ... x(n) -> ... x(n) x(n)
        self.push(self.stack[-inst.arg])

    def SWAP(self, inst):
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    # --- loads and stores -----------------------------------------------------------------------------
    def LOAD_CONST(self, inst):  # -> const
        self.push(ConstantVariable(inst.argval))

    def RETURN_CONST(self, inst):  # (3.12) ->
        raise _Return(ConstantVariable(inst.argval))

    def RETURN_VALUE(self, inst):  # x ->
        raise _Return(self.pop())

    def LOAD_FAST(self, inst):  # -> local
        v = self.locals.get(inst.argval)
        if v is None:
            raise Unsupported(f"local variable {inst.argval!r} referenced before assignment")
        self.push(v)

    def LOAD_FAST_AND_CLEAR(self, inst):  # (3.12, inlined comprehensions) -> local or NULL
        self.push(self.locals.pop(inst.argval, NullVariable()))

    def STORE_FAST(self, inst):  # x ->
        v = self.pop()
        if isinstance(v, NullVariable):
            self.locals.pop(inst.argval, None)
        else:
            self.locals[inst.argval] = v

    def DELETE_FAST(self, inst):
        self.locals.pop(inst.argval, None)

    def MAKE_CELL(self, inst):
        if inst.argval not in self.cells:
            self.cells[inst.argval] = NewCellVariable(self.locals.pop(inst.argval, None))

    def LOAD_CLOSURE(self, inst):  # -> cell
        self.push(self.cells[inst.argval])

    def LOAD_DEREF(self, inst):  # -> cell contents
        self.push(self.cells[inst.argval].get(self))

    def STORE_DEREF(self, inst):  # x ->
        self.cells[inst.argval].set(self, self.pop())

    def _global_source(self, name):
        if self.f_globals is self.out.f_globals:
            return GlobalSource(name)
        return module_global_source(self.f_globals, name)

    def load_global(self, name):
        pending = self.out.side_effects.global_value(self.f_globals, name)
        if pending is not None:
            return pending
        if name in self.f_globals:
            return self.wrap(self.f_globals[name], self._global_source(name))
        b = self.f_globals.get("__builtins__", builtins)
        b = b if isinstance(b, dict) else b.__dict__
        if name in b:
            return self.wrap(b[name], None)
        raise Unsupported(f"name {name!r} is not defined")

    def LOAD_GLOBAL(self, inst):  # -> [NULL] global
        if inst.arg & 1:
            self.push(NullVariable())
        self.push(self.load_global(inst.argval))

    def STORE_GLOBAL(self, inst):  # x ->
        self.out.side_effects.store_global(self.f_globals, inst.argval, self.pop())

    def LOAD_ATTR(self, inst):  # obj -> attr  |  (3.12 method flag) obj -> NULL attr
        obj = self.pop()
        attr = self.getattr(obj, inst.argval)
        if _VT.load_attr_method_flag and inst.arg & 1:
            self.push(NullVariable())
        self.push(attr)

    def LOAD_METHOD(self, inst):  # (3.11) obj -> NULL attr
        obj = self.pop()
        self.push(NullVariable())
        self.push(self.getattr(obj, inst.argval))

    def LOAD_SUPER_ATTR(self, inst):  # (3.12) super cls self -> [NULL] attr
        self_var = self.pop()
        cls = self.pop()
        self.pop()
        attr = SuperVariable(cls.as_python_constant(), self_var).var_getattr(self, inst.argval)
        if inst.arg & 1:
            self.push(NullVariable())
        self.push(attr)

    def STORE_ATTR(self, inst):  # value obj ->
        obj = self.pop()
        value = self.pop()
        obj.store_attr(self, inst.argval, value)

    def DELETE_ATTR(self, inst):  # obj ->
        obj = self.pop()
        if not isinstance(obj, UserObjectVariable) or isinstance(obj, NNModuleVariable):
            raise Unsupported(f"del on an attribute of {type(obj).__name__}")
        obj.store_attr(self, inst.argval, DeletedVariable())

    def BINARY_SUBSCR(self, inst):  # container key -> item
        key = self.pop()
        self.push(self.getitem(self.pop(), key))

    def STORE_SUBSCR(self, inst):  # value container key ->
        key, container, value = self.pop(), self.pop(), self.pop()
        if isinstance(container, TensorVariable):
            self.out.call_tensor_op(
                self, "call_function", operator.setitem, [container, key, value], {}
            )
        else:
            container.call_method(self, "__setitem__", [key, value], {})

    def DELETE_SUBSCR(self, inst):
        key, container = self.pop(), self.pop()
        container.call_method(self, "__delitem__", [key], {})

    def BINARY_SLICE(self, inst):  # (3.12) container start end -> item
        end, start, container = self.pop(), self.pop(), self.pop()
        self.push(self.getitem(container, self.make_slice([start, end])))

    def STORE_SLICE(self, inst):  # (3.12) value container start end ->
        end, start, container, value = self.pop(), self.pop(), self.pop(), self.pop()
        key = self.make_slice([start, end])
        if isinstance(container, TensorVariable):
            self.out.call_tensor_op(
                self, "call_function", operator.setitem, [container, key, value], {}
            )
        else:
            container.call_method(self, "__setitem__", [key, value], {})

    def LOAD_ASSERTION_ERROR(self, inst):
        self.push(ConstantVariable(AssertionError))

    def RAISE_VARARGS(self, inst):
        raise Unsupported(
            "raise inside a captured function (an assert or raise was reached)",
            "the condition leading here was known at capture time and true",
        )

    def IMPORT_NAME(self, inst):  # level fromlist -> module
        fromlist, level = self.pop(), self.pop()
        self.push(
            ConstantVariable(
                __import__(inst.argval, self.f_globals, None, fromlist.value, level.value)
            )
        )

    def IMPORT_FROM(self, inst):  # module -> module attr
        self.push(self.getattr(self.stack[-1], inst.argval))

    # --- operators ---------------------------------------------------------------------------------------
    def BINARY_OP(self, inst):  # a b -> a op b
        b, a = self.pop(), self.pop()
        self.push(binary_op(self, BINARY_OPS[inst.argrepr], a, b))

    def COMPARE_OP(self, inst):  # a b -> a cmp b
        b, a = self.pop(), self.pop()
        self.push(binary_op(self, COMPARE_OPS[inst.argval], a, b))

    def IS_OP(self, inst):  # a b -> bool
        b, a = self.pop(), self.pop()
        r = identity(a, b, self)
        self.push(ConstantVariable(r != bool(inst.arg)))

    def CONTAINS_OP(self, inst):  # item container -> bool
        container, item = self.pop(), self.pop()
        self.push(ConstantVariable(contains(self, item, container) != bool(inst.arg)))

    def _unary(self, fn):
        x = self.pop()
        if isinstance(x, TensorVariable):
            self.push(self.out.call_tensor_op(self, "call_function", fn, [x], {}))
        elif isinstance(x, NumpyNdarrayVariable):
            self.push(numpy_operator(self, fn, [x]))
        elif isinstance(x, SymNodeVariable) and x.unbacked:
            self.push(sym_unary(self, fn, x))  # -n of a value read from a tensor stays symbolic
        else:
            self.push(ConstantVariable(fn(x.as_python_constant())))

    def UNARY_NEGATIVE(self, inst):
        self._unary(operator.neg)

    def UNARY_INVERT(self, inst):
        self._unary(operator.invert)

    def UNARY_POSITIVE(self, inst):
        self._unary(operator.pos)

    def UNARY_NOT(self, inst):
        self.push(ConstantVariable(not self.truth(self.pop())))

    def CALL_INTRINSIC_1(self, inst):  # (3.12) x -> f(x)
        name = inst.argrepr
        if name == "INTRINSIC_LIST_TO_TUPLE":
            self.push(TupleVariable(self.pop().items))
        elif name == "INTRINSIC_UNARY_POSITIVE":
            self._unary(operator.pos)
        else:
            raise Unsupported(f"CALL_INTRINSIC_1 {name}")

    def GET_LEN(self, inst):
        self.push(_len(self, self.stack[-1]))

    # --- calls -----------------------------------------------------------------------------------------
    def KW_NAMES(self, inst):  # (decode resolves the names tuple in every version)
        self.kw_names = inst.argval

    def PRECALL(self, inst):
        pass

    def CALL(self, inst):  # NULL|callable callable|self args... -> result
        args = self.popn(inst.arg)
        b, a = self.pop(), self.pop()
        if isinstance(a, NullVariable):
            fn = b
        else:
            fn, args = a, [b, *args]
        kwargs = {}
        if self.kw_names:
            n = len(self.kw_names)
            kwargs = dict(zip(self.kw_names, args[-n:]))
            args = args[:-n]
            self.kw_names = ()
        self.push(self.call_function(fn, args, kwargs))

    def CALL_FUNCTION_EX(self, inst):  # [NULL] fn args [kwargs] -> result
        kwargs = self.pop() if inst.arg & 1 else DictVariable({})
        args = self.pop()
        fn = self.pop()
        if self.stack and isinstance(self.stack[-1], NullVariable):
            self.pop()
        if not isinstance(kwargs, DictVariable):
            raise Unsupported("**kwargs that is not a dict")
        self.push(self.call_function(fn, self.unpack(args), dict(kwargs.items)))

    def MAKE_FUNCTION(
        self, inst
    ):  # [defaults] [kwdefaults] [annotations] [closure] code -> function
        code = self.pop().as_python_constant()
        closure = self.unpack(self.pop()) if inst.arg & 0x08 else ()
        if inst.arg & 0x04:
            self.pop()
        kwdefaults = _as_dict(self.pop()) if inst.arg & 0x02 else {}
        defaults = self.unpack(self.pop()) if inst.arg & 0x01 else ()
        self.push(
            UserFunctionVariable(
                code, self.f_globals, defaults=defaults, kwdefaults=kwdefaults, closure=closure
            )
        )

    def BEFORE_WITH(self, inst):  # ctx -> exit enter_result
        ctx = self.pop()
        exit_fn, result = enter_context(self, ctx)
        self.push(exit_fn)
        self.push(result)


def grad_mode_guard(out) -> None:
    """Grad mode, autocast, default dtype, ... as they are now (the capture specialised on them)."""
    out.guards.append(GlobalStateMatch.capture())
