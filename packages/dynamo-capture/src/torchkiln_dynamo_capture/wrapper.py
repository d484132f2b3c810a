"""The captured callable: cache entries checked by generated guard functions, capture on a miss."""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torchkiln_guards import CompiledGuards, compile_guards

from ._guards import batch_guards
from ._logging import log_recompile
from ._sources import ClosureSource, HeldObjectSource, LocalSource
from .exc import RecompileLimitExceeded, Unsupported
from .output import OutputGraph
from .translator import InstructionTranslator, grad_mode_guard
from .variables.functions import NewCellVariable, RealCellVariable


@dataclass
class CacheEntry:
    """One captured specialisation: ``check`` its guards, ``run`` the transformed code."""

    check: Callable[..., bool]
    run: Callable[..., Any]
    guards: CompiledGuards
    graph_module: torch.fx.GraphModule | None
    run_source: str
    op_count: int


def capture_frame(fn, args, kwargs, backend) -> CacheEntry:
    """Symbolically evaluate one call of ``fn`` and build its cache entry (raises Unsupported)."""
    bound_self = None
    if isinstance(fn, types.MethodType):
        bound_self, func = fn.__self__, fn.__func__
    else:
        func = fn
    if not isinstance(func, types.FunctionType):
        raise Unsupported(f"capturing {type(fn).__name__} objects", "pass a Python function, method or nn.Module")
    code = func.__code__
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
        raise Unsupported("capturing a generator or coroutine function")
    sig = inspect.signature(fn)
    out = OutputGraph(func.__globals__)
    grad_mode_guard(out)
    tx = InstructionTranslator(out, code, func.__globals__, {}, {})
    ba = sig.bind(*args, **kwargs)
    ba.apply_defaults()
    localvars = {}
    if bound_self is not None:
        self_src = HeldObjectSource(bound_self, f"{func.__qualname__}.__self__")
        localvars[code.co_varnames[0]] = tx.wrap(bound_self, self_src)
    for name, value in ba.arguments.items():
        localvars[name] = tx.wrap(value, LocalSource(name))
    real_cells = {}
    cells = {}
    for name in code.co_cellvars:
        cells[name] = NewCellVariable(localvars.pop(name, None))
    for name, cell in zip(code.co_freevars, func.__closure__ or ()):
        real_cells[name] = cell
        cells[name] = RealCellVariable(cell, ClosureSource(name))
    tx.locals, tx.cells = localvars, cells
    grad = torch.is_grad_enabled()
    try:
        ret = tx.run()
        _, run, run_src, gm = out.compile(ret, backend, sig, real_cells)
    finally:
        torch._C._set_grad_enabled(grad)
    compiled_guards = compile_guards(batch_guards(out.guards), signature=sig, f_globals=func.__globals__, closure=real_cells)
    return CacheEntry(compiled_guards.check, run, compiled_guards, gm, run_src, out.op_count() if gm is not None else 0)


class CapturedFunction:
    """The callable ``capture`` returns. Hot path: the first entry whose guards pass runs."""

    def __init__(self, fn, backend, *, fullgraph=False, dynamic=None, recompile_limit=8):
        self._fn = fn
        self._backend = backend
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.recompile_limit = recompile_limit
        self.entries: list[CacheEntry] = []
        self.backend_calls = 0
        self.unsupported: Unsupported | None = None
        self._eager = False
        self._warned_limit = False
        self._module = None  # the nn.Module, when this captures one (for file:line in messages)
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        for entry in self.entries:
            if entry.check(*args, **kwargs):
                return entry.run(*args, **kwargs)
        return self._miss(args, kwargs)

    def __get__(self, obj, objtype=None):
        # used as a decorator on a method: bind like a function would
        return self if obj is None else types.MethodType(self, obj)

    @property
    def graph_count(self) -> int:
        return sum(1 for e in self.entries if e.graph_module is not None)

    def _counting_backend(self, gm, example_inputs):
        self.backend_calls += 1
        return self._backend(gm, example_inputs)

    def _miss(self, args, kwargs):
        if self._eager:
            return self._fn(*args, **kwargs)
        if len(self.entries) >= self.recompile_limit:
            if not self._warned_limit:
                self._warned_limit = True
                why = self._why_missed(args, kwargs)
                warnings.warn(f"torchkiln: {self.__name__} ({self._where()}) hit recompile_limit={self.recompile_limit} "
                              f"(last failing guard: {why}); running eagerly", RecompileLimitExceeded, stacklevel=3)
            return self._fn(*args, **kwargs)
        if self.entries:
            log_recompile(f"Recompiling {self.__name__} ({self._where()}): {self._why_missed(args, kwargs)}")
        try:
            entry = capture_frame(self._fn, args, kwargs, self._counting_backend)
        except Unsupported as e:
            self.unsupported = e
            if self.fullgraph:
                raise
            warnings.warn(f"torchkiln: running {self.__name__} eagerly: {e}", stacklevel=3)
            self._eager = True
            return self._fn(*args, **kwargs)
        except Exception as e:  # an internal error must not break the user's program
            if self.fullgraph:
                raise
            self.unsupported = Unsupported(f"internal error during capture: {type(e).__name__}: {e}")
            warnings.warn(f"torchkiln: running {self.__name__} eagerly: {self.unsupported}", stacklevel=3)
            self._eager = True
            return self._fn(*args, **kwargs)
        self.entries.append(entry)
        return entry.run(*args, **kwargs)


    def _why_missed(self, args, kwargs) -> str:
        """The first failing guard of the most recent entry, as explain_failure words it."""
        try:
            return str(self.entries[-1].guards.explain_failure(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - explaining must never break the call
            return f"<could not explain: {type(e).__name__}: {e}>"

    def _where(self) -> str:
        """The user function's file:line (a module's forward for a captured module)."""
        fn = self._fn
        if fn is _call_module and self._module is not None:
            fn = type(self._module).forward
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"


def _call_module(self, *args, **kwargs):
    return self(*args, **kwargs)


class CapturedModule(torch.nn.Module):
    """An nn.Module whose calls are captured; attributes, parameters and state_dict are the original's."""

    def __init__(self, mod: torch.nn.Module, captured: CapturedFunction):
        super().__init__()
        self._modules["_orig_mod"] = mod
        self.__dict__["_mod"] = mod
        self.__dict__["_captured"] = captured

    def __call__(self, *args, **kwargs):
        return self._captured(self._mod, *args, **kwargs)

    forward = __call__

    def __getattr__(self, name):
        if name == "_orig_mod":
            return self._modules["_orig_mod"]
        return getattr(self._modules["_orig_mod"], name)

    def __setattr__(self, name, value):
        if name in ("_orig_mod",):
            return super().__setattr__(name, value)
        setattr(self._mod, name, value)

    def state_dict(self, *args, **kwargs):
        return self._mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._mod.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args, **kwargs):
        return self._mod.named_parameters(*args, **kwargs)

    def parameters(self, recurse: bool = True):
        return self._mod.parameters(recurse)

    def named_buffers(self, *args, **kwargs):
        return self._mod.named_buffers(*args, **kwargs)

    def buffers(self, recurse: bool = True):
        return self._mod.buffers(recurse)

    def train(self, mode: bool = True):
        self._mod.train(mode)
        return self

    def __repr__(self):
        return f"Captured({self._mod!r})"


def capture(fn, backend, *, fullgraph: bool = False, dynamic=None, recompile_limit: int = 8):
    """Wrap ``fn`` (function, bound method or nn.Module) so its calls are captured into FX graphs.

    ``backend(gm, example_inputs) -> callable`` receives each graph (torch-level FX, parameters as
    get_attr, real example inputs) like a torch.compile backend. With ``fullgraph=True`` anything
    capture cannot handle raises ``Unsupported``; otherwise the function runs eagerly with a warning.
    Shapes are static: ``dynamic=True`` is not implemented yet and says so with a warning (each
    new input shape compiles a new guarded entry, so results stay correct).
    """
    if dynamic:
        warnings.warn(
            "torchkiln: dynamic=True is not supported yet; shapes are specialized, so each new "
            "input shape compiles a new entry (results are unaffected)",
            stacklevel=2,
        )
    if isinstance(fn, torch.nn.Module):
        captured = CapturedFunction(_call_module, backend, fullgraph=fullgraph, dynamic=dynamic, recompile_limit=recompile_limit)
        captured.__name__ = type(fn).__name__
        captured._module = fn
        return CapturedModule(fn, captured)
    if not callable(fn):
        raise TypeError(f"capture expects a function, method or nn.Module, got {type(fn).__name__}")
    return CapturedFunction(fn, backend, fullgraph=fullgraph, dynamic=dynamic, recompile_limit=recompile_limit)
