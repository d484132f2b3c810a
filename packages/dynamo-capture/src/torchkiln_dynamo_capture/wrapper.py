"""The captured callable: cache entries checked by generated guard functions, capture on a miss."""

from __future__ import annotations

import functools
import inspect
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import trace_rules
from ._logging import check_log_names, log_recompile
from .automatic_dynamic import EveryDim, SizeHistory
from .breaks import GraphBreak
from .bytecode.closures import closure_as_arguments, comprehension_over_tuple
from .bytecode.registry import CodeRegistry
from .bytecode.resume import resume_code, step_code
from .exc import BackendError, FailOnRecompileLimitHit, RecompileLimitExceeded, Unsupported
from .frame import CacheEntry, capture_frame, code_signature, make_function
from .module_proxy import CapturedModule
from .trace_rules import wrapped_module

#: One capture (and backend compile) at a time in the process, held only while capturing, never
#: while a graph or the user's code runs. Threads making their first call of a function together
#: then compile it once: the ones that waited find the entry the first one made. And capture runs
#: torch.fx tracers, whose patcher is a module global (torch/fx/_symbolic_trace.py
#: CURRENT_PATCHER, not ours to change): two traces on two threads failed with "CURRENT_PATCHER is
#: None" and left the function eager for good. Re-entrant: a capture may call another's miss.
_CAPTURE_LOCK = threading.RLock()

#: What capture hands each graph to, as torch.compile does: ``backend(gm, example_inputs)``
#: returns the callable that runs the graph.
CompilerFn = Callable[[torch.fx.GraphModule, list[Any]], Callable[..., Any]]

#: iterators over builtin containers: taking their items ahead runs no user code
_CONTAINER_ITERATORS: frozenset[type] = frozenset(
    map(
        type,
        (
            iter([]),
            iter(()),
            iter(range(0)),
            iter({}),
            iter({}.values()),
            iter({}.items()),
            iter(""),
            iter("\u00e9"),
        ),
    )
)


def _call_comprehension(fn, captured, iterator):
    """``fn(iterator)`` for a 3.11 comprehension ``fn`` (see ``CaptureContext.comprehension_callee``)."""
    if type(iterator) not in _CONTAINER_ITERATORS:
        return fn(iterator)
    return captured(*(fn.__closure__ or ()), tuple(iterator))


class CaptureContext:
    """What one ``capture`` call shares with the continuations and callees its breaks create.

    Every graph of the tree goes through ``compile_graph`` (counted), every break is recorded, and
    continuation/step functions are cached by (original code, instruction, stack layout, live locals)
    so a break reached again (a loop, a second call) reuses them and their guarded entries.
    """

    def __init__(
        self,
        backend: CompilerFn,
        *,
        fullgraph: bool,
        dynamic: bool | None,
        recompile_limit: int,
        capture_scalar_outputs: bool = False,
        strict: bool = False,
    ) -> None:
        self.backend = backend
        self.fullgraph = fullgraph
        #: an internal error of capture itself (not an ``Unsupported``) raises, where it would
        #: run the function eagerly with a warning (torchkiln's strict mode)
        self.strict = strict
        self.dynamic = dynamic
        #: ``.item()`` / ``.tolist()`` as unbacked symbolic values in the graph (else a break)
        self.capture_scalar_outputs = capture_scalar_outputs
        self.recompile_limit = recompile_limit
        self.graphs: list[torch.fx.GraphModule] = []
        self.breaks: list[GraphBreak] = []
        self.break_errors: list[Unsupported] = []
        #: breaks recorded in capture's own frame (the module wrapper's call of the module), each
        #: with its cause: dropped once the callee's frame records the same cause where it is
        self._own_breaks: list[tuple[GraphBreak, str]] = []
        self.functions: list[CapturedFunction] = []
        self._resumes: dict = {}
        self._steps: dict = {}
        self._callees: dict = {}
        #: where each code object these caches hold came from (continuations, closure transforms):
        #: owned here, so it lives and dies with this capture, not with the process
        self.codes = CodeRegistry()

    def compile_graph(self, gm, example_inputs):
        self.graphs.append(gm)
        return self.backend(gm, example_inputs)

    def record_break(self, record: GraphBreak, err: Unsupported, own: bool = False) -> None:
        """Keep ``record``. ``own``: it is in capture's own frame (``_call_module``), which
        splits no graph: the callee's frame, captured next, records the cause where the user's
        code is, and then this one goes. It stays when the callee records nothing (a
        DistributedDataParallel, whose forward runs in Python): the only record of the cause."""
        if own:
            self._own_breaks.append((record, err.construct))
        else:
            for pending in [p for p in self._own_breaks if p[1] == err.construct]:
                k = next(k for k, b in enumerate(self.breaks) if b is pending[0])
                del self.breaks[k], self.break_errors[k]
                self._own_breaks.remove(pending)
        self.breaks.append(record)
        self.break_errors.append(err)

    def _child(self, fn, name: str) -> CapturedFunction:
        child = CapturedFunction(
            fn,
            self.backend,
            fullgraph=self.fullgraph,
            dynamic=self.dynamic,
            recompile_limit=self.recompile_limit,
            ctx=self,
        )
        child.__name__ = name
        return child

    def resume_function(
        self, orig: types.CodeType, index: int, layout, live, func
    ) -> CapturedFunction:
        key = (orig, index, layout, live)
        fn = self._resumes.get(key)
        if fn is None:
            name = f"resume_at_{index}"
            code = resume_code(orig, index, layout, live, name, self.codes)
            fn = self._child(make_function(code, func), f"{orig.co_name}.{name}")
            self._resumes[key] = fn
        return fn

    def step_function(
        self, orig, first, last, layout, live, successors, func, getter=None
    ) -> types.FunctionType:
        """The step of a break (see ``bytecode/resume.py``); ``getter``: (name, fget) of a property
        whose getter broke, read in the step through ``property_reader``."""
        key = (
            orig,
            first,
            last,
            layout,
            live,
            tuple((s.jump, id(s.resume)) for s in successors),
            getter and (getter[0], id(getter[1])),
        )
        fn = self._steps.get(key)
        if fn is None:
            reader = self.property_reader(*getter) if getter else None
            code = step_code(
                orig, first, last, layout, live, successors, f"step_at_{first}", reader
            )
            self.codes.add_step(code)
            fn = make_function(code, func)
            self._steps[key] = fn
        return fn

    def function_callee(self, fn) -> CapturedFunction:
        """``fn`` captured as its own frame (its body broke when inlined)."""
        c = self._callees.get(id(fn))
        if c is None:
            c = self._callees[id(fn)] = self._child(fn, getattr(fn, "__qualname__", "callee"))
            c._keepalive = fn  # the cache is keyed by id(fn): fn must outlive its entry
        return c

    def property_reader(self, name: str, fget) -> PropertyReader:
        """``obj.name`` with the @property getter ``fget`` captured as its own frame (its body
        broke when inlined): one captured function per getter, since the objects it reads are
        often made on each call."""
        key = ("property", name, id(fget))
        reader = self._callees.get(key)
        if reader is None:
            captured = self._child(fget, getattr(fget, "__qualname__", name))
            captured._keepalive = fget
            reader = self._callees[key] = PropertyReader(name, fget, captured)
        return reader

    def method_callee(self, fn, obj):
        """``obj.fn`` captured as its own frame: one captured function per (function, object), so
        many instances (the layers of a model) do not crowd one function's recompile limit."""
        key = (id(fn), id(obj))
        c = self._callees.get(key)
        if c is None:
            c = self._callees[key] = self._child(fn, getattr(fn, "__qualname__", "callee"))
            c._keepalive = (fn, obj)
        return types.MethodType(c, obj)

    def made_callee(self, fn):
        """A function made at run time (nested def, lambda, closure), captured once per code object.
        Its cells are new each time the enclosing frame runs, so they are passed as arguments (see
        ``closure_as_arguments``). Functions with defaults are called as they are: the defaults
        belong to the object, not the code."""
        if fn.__defaults__ or fn.__kwdefaults__:
            return fn
        key = ("made", fn.__code__)
        c = self._callees.get(key)
        if c is None:
            code = (
                closure_as_arguments(fn.__code__, self.codes)
                if fn.__code__.co_freevars
                else fn.__code__
            )
            plain = types.FunctionType(code, fn.__globals__, fn.__name__)
            c = self._callees[key] = self._child(plain, fn.__qualname__)
        return functools.partial(c, *fn.__closure__) if fn.__closure__ else c

    def comprehension_callee(self, fn):
        """A 3.11 comprehension function (``<listcomp>``, ``<dictcomp>``, ``<setcomp>``), called with
        the iterator its caller made, captured once per code object: over a builtin container the
        iterator's remaining items are handed over as a tuple (see ``comprehension_over_tuple``) and
        its cells as leading arguments (as ``made_callee``). Any other iterator (a generator, a user
        iterator) runs the comprehension as it is: consuming it ahead would move its side effects."""
        key = ("comprehension", fn.__code__)
        c = self._callees.get(key)
        if c is None:
            plain = types.FunctionType(
                comprehension_over_tuple(fn.__code__, self.codes), fn.__globals__, fn.__name__
            )
            c = self._callees[key] = self._child(plain, fn.__qualname__)
        return functools.partial(_call_comprehension, fn, c)

    def constructor_callee(self, cls):
        """``cls(...)`` with its ``__init__`` captured as its own frame (None: not a plain class)."""
        init = cls.__dict__.get("__init__") if isinstance(cls, type) else None
        if (
            cls.__new__ is not object.__new__
            or type(cls) is not type
            or not isinstance(init, types.FunctionType)
        ):
            return None
        key = ("construct", id(cls))
        made = self._callees.get(key)
        if made is None:
            captured_init = self._child(init, f"{cls.__qualname__}.__init__")

            def made(*args, **kwargs):
                obj: Any = object.__new__(cls)
                captured_init(obj, *args, **kwargs)
                return obj

            # the cache is keyed by id(cls): cls must outlive its entry (a function attribute)
            made._keepalive = cls  # type: ignore[attr-defined]
            self._callees[key] = made
        return made

    def module_callee(self, mod):
        """Calling ``mod`` with its forward captured as its own frame. Without hooks the captured
        forward is called directly; with hooks nn.Module's own ``__call__`` runs them (in Python)
        around the captured forward (see ``_call_with_forward``). A distributed wrapper (DDP, FSDP)
        runs its own forward in Python around the wrapped module's captured forward."""
        inner = wrapped_module(mod)
        if inner is not None:
            forward = type(inner).forward
            if not isinstance(forward, types.FunctionType) or "forward" in inner.__dict__:
                return mod
            return functools.partial(_call_wrapper, mod, inner, self.method_callee(forward, inner))
        forward = type(mod).forward
        if not isinstance(forward, types.FunctionType) or "forward" in mod.__dict__:
            return mod
        captured = self.method_callee(forward, mod)
        if not _has_hooks(mod):
            return captured
        return functools.partial(_call_with_forward, mod, captured)


class PropertyReader:
    """``reader(obj)`` is ``obj.name``: through the captured getter while ``type(obj)`` still
    resolves ``name`` to the property capture saw, else the ordinary lookup (a subclass that
    overrides it, an instance of another class at the same place)."""

    def __init__(self, name: str, fget, captured) -> None:
        self.name, self.fget, self.captured = name, fget, captured

    def __call__(self, obj):
        for klass in type(obj).__mro__:
            attr = klass.__dict__.get(self.name)
            if attr is not None:
                if isinstance(attr, property) and attr.fget is self.fget:
                    return self.captured(obj)
                break
        return getattr(obj, self.name)


def _has_hooks(mod) -> bool:
    return bool(
        mod._forward_hooks
        or mod._forward_pre_hooks
        or mod._backward_hooks
        or mod._backward_pre_hooks
        or _global_module_hooks()
    )


def _call_with_forward(mod, forward, *args, **kwargs):
    """``mod(*args, **kwargs)`` with ``forward`` in place of its forward for this one call: every
    hook kind keeps nn.Module's exact semantics (the order, kwargs hooks, backward hooks)."""
    return _call_wrapper(mod, mod, forward, *args, **kwargs)


def _call_wrapper(mod, inner, forward, *args, **kwargs):
    """``mod(*args, **kwargs)`` with ``forward`` in place of the forward of ``inner``, the module
    ``mod`` wraps (or ``mod`` itself), for this one call: the wrapper's own forward runs as written."""
    inner.__dict__["forward"] = forward
    try:
        return mod(*args, **kwargs)
    finally:
        inner.__dict__.pop("forward", None)


def _global_module_hooks() -> bool:
    from torch.nn.modules import module as _m

    return bool(
        _m._global_forward_hooks
        or _m._global_forward_pre_hooks
        or _m._global_backward_hooks
        or _m._global_backward_pre_hooks
    )


class CapturedFunction:
    """The callable ``capture`` returns. Hot path: the first entry whose guards pass runs."""

    #: what a callee made by CaptureContext keeps alive (its cache is keyed by ids)
    _keepalive: Any

    def __init__(
        self,
        fn: Callable[..., Any],
        backend: CompilerFn,
        *,
        fullgraph: bool = False,
        dynamic: bool | None = None,
        recompile_limit: int = 8,
        ctx: CaptureContext | None = None,
        capture_scalar_outputs: bool = False,
        strict: bool = False,
    ) -> None:
        self._fn = fn
        self._backend = backend
        self.ctx = ctx or CaptureContext(
            backend,
            fullgraph=fullgraph,
            dynamic=dynamic,
            recompile_limit=recompile_limit,
            capture_scalar_outputs=capture_scalar_outputs,
            strict=strict,
        )
        self.ctx.functions.append(self)
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.recompile_limit = recompile_limit
        self.entries: list[CacheEntry] = []
        self.unsupported: Unsupported | None = None
        self._eager = False
        self._warned_limit = False
        self._module: torch.nn.Module | None = (
            None  # the nn.Module, when this captures one (for file:line in messages)
        )
        # automatic dynamic shapes (dynamic=None): sizes of every input tensor when first captured
        # (arguments and tensors reached through them); a later capture makes the dims that
        # changed symbolic ("L['x']" -> dims)
        self._sizes = SizeHistory()
        self._auto_dims: dict[str, frozenset[int]] = {}
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for entry in self.entries:
            if entry.check(*args, **kwargs):
                return entry.run(*args, **kwargs)
        return self._miss(args, kwargs)

    def __get__(self, obj, objtype=None):
        # used as a decorator on a method: bind like a function would
        return self if obj is None else types.MethodType(self, obj)

    @property
    def graph_count(self) -> int:
        """Graphs compiled for this capture: this function's, its continuations' and callees'."""
        return len(self.ctx.graphs)

    @property
    def graph_breaks(self) -> list:
        """Every graph break of this capture (GraphBreak records, in the order they happened)."""
        return list(self.ctx.breaks)

    @property
    def backend_calls(self) -> int:
        return len(self.ctx.graphs)

    def _miss(self, args, kwargs):
        entry: CacheEntry | None
        with _CAPTURE_LOCK:
            for entry in self.entries:  # made by a thread this one waited for
                if entry.check(*args, **kwargs):
                    break
            else:
                entry = self._capture(args, kwargs)
        if entry is None:
            # outside the lock (other threads compile meanwhile) and outside any except block:
            # the user's code must not see capture's error as the exception being handled
            # (sys.exc_info(), a bare raise, __context__)
            return self._fn(*args, **kwargs)
        return entry.run(*args, **kwargs)

    def _capture(self, args, kwargs) -> CacheEntry | None:
        """A new entry for this call (holding ``_CAPTURE_LOCK``), or None: run it eagerly."""
        if self._eager:
            return None
        if len(self.entries) >= self.recompile_limit:
            if self.fullgraph:
                raise FailOnRecompileLimitHit(
                    f"{self.__name__} ({self._where()}) hit recompile_limit={self.recompile_limit} "
                    f"with fullgraph=True (last failing guard: {self._why_missed(args, kwargs)}); "
                    "raise the limit (torchkiln.compile(recompile_limit=...)) or mark the changing "
                    "size dynamic"
                )
            if not self._warned_limit and not any(e.op_count for e in self.entries):
                # no entry captured an operation (a helper that installs hooks on one module
                # after another): running it eagerly loses nothing, so it is logged, not warned
                self._warned_limit = True
                log_recompile(
                    f"{self.__name__} ({self._where()}) hit recompile_limit={self.recompile_limit} "
                    "with no operation in any graph; running eagerly"
                )
            if not self._warned_limit:
                self._warned_limit = True
                why = self._why_missed(args, kwargs)
                warnings.warn(
                    f"torchkiln: {self.__name__} ({self._where()}) hit recompile_limit={self.recompile_limit} "
                    f"(last failing guard: {why}); running eagerly",
                    RecompileLimitExceeded,
                    stacklevel=4,
                )
            return None
        if self.entries:
            log_recompile(
                f"Recompiling {self.__name__} ({self._where()}): {self._why_missed(args, kwargs)}"
            )
        try:
            entry = capture_frame(self._fn, args, kwargs, self.ctx, self._dynamic_for(args, kwargs))
        except Unsupported as e:
            self.unsupported = e
            if self.fullgraph:
                raise
            warnings.warn(f"torchkiln: running {self.__name__} eagerly: {e}", stacklevel=4)
            self._eager = True
        except Exception as e:  # an internal error must not break the user's program
            if self.fullgraph or self.ctx.strict or isinstance(e, BackendError):
                raise
            self.unsupported = Unsupported(
                f"internal error during capture: {type(e).__name__}: {e}"
            )
            warnings.warn(
                f"torchkiln: running {self.__name__} eagerly: {self.unsupported}", stacklevel=4
            )
            self._eager = True
        if self._eager:
            return None
        self.entries.append(entry)
        self._sizes.record(entry.guards)
        return entry

    def _dynamic_for(self, args, kwargs):
        """Which input dims the next capture makes symbolic: every dim (dynamic=True), none
        (dynamic=False), or (dynamic=None) those whose size differs from the first capture's."""
        marked = _marked_dims(self._fn, args, kwargs)  # TorchDynamo's mark_dynamic and ours
        if self.dynamic is False:
            return marked or False
        if not self.entries:
            return True if self.dynamic else (marked or False)
        for name, changed in self._sizes.changed_dims(
            self.entries[-1].guards, args, kwargs
        ).items():
            self._auto_dims[name] = self._auto_dims.get(name, frozenset()) | changed
        if self.dynamic:
            return EveryDim(self._auto_dims) if self._auto_dims else True
        dims = {
            k: self._auto_dims.get(k, frozenset()) | marked.get(k, frozenset())
            for k in {*self._auto_dims, *marked}
        }
        return dims or False

    def _why_missed(self, args, kwargs) -> str:
        """The first failing guard of the most recent entry, as explain_failure words it."""
        try:
            return str(self.entries[-1].guards.explain_failure(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - explaining must never break the call
            return f"<could not explain: {type(e).__name__}: {e}>"

    def _where(self) -> str:
        """The user function's file:line (a module's forward for a captured module)."""
        fn = self._fn
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        if fn is _call_module and self._module is not None:
            fn = type(self._module).forward
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else "?"


def _marked_dims(fn, args, kwargs) -> dict[str, frozenset[int]]:
    """``{"L['x']": dims}`` marked dynamic on the tensor arguments of a call (top level only)."""
    return {
        src: dims
        for src, t in _tensor_args(fn, args, kwargs).items()
        if (dims := trace_rules.marked_dynamic_dims(t))
    }


def _tensor_args(fn, args, kwargs) -> dict[str, torch.Tensor]:
    """``{"L['x']": tensor}`` for the tensor arguments of a call of ``fn`` (top level only)."""
    try:
        sig = code_signature(fn)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError, AttributeError):  # (not a Python function)
        return {}
    sizes = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:  # a module's forward gets its inputs as *args
            items = {f"L[{name!r}][{i}]": v for i, v in enumerate(value)}
        elif kind is inspect.Parameter.VAR_KEYWORD:
            items = {f"L[{name!r}][{k!r}]": v for k, v in value.items()}
        else:
            items = {f"L[{name!r}]": value}
        sizes.update({src: v for src, v in items.items() if isinstance(v, torch.Tensor)})
    return sizes


def _call_module(self, *args, **kwargs):
    return self(*args, **kwargs)


def capture(
    fn: Callable[..., Any],
    backend: CompilerFn,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    recompile_limit: int = 8,
    capture_scalar_outputs: bool = False,
    strict: bool = False,
) -> CapturedFunction | CapturedModule:
    """Wrap ``fn`` (function, bound method or nn.Module) so its calls are captured into FX graphs.

    ``backend(gm, example_inputs) -> callable`` receives each graph (torch-level FX, parameters as
    get_attr, real example inputs) like a torch.compile backend. With ``fullgraph=True`` anything
    capture cannot handle raises ``Unsupported``; otherwise the function runs eagerly with a warning.
    ``dynamic``: True gives every input dim a symbolic size (one entry serves all sizes, with shape
    guards for what the graph relied on); False specializes every size; None (the default) starts
    static and makes the dims that changed size symbolic at the first recompile (automatic dynamic).
    ``capture_scalar_outputs``: ``.item()`` and ``.tolist()`` give unbacked symbolic values that
    stay in the graph (TorchDynamo's option of that name); False (the default) breaks the graph there.
    ``strict``: an internal error of capture itself raises; by default the function runs eagerly
    with a warning (code capture does not handle, ``Unsupported``, still breaks or runs eagerly).
    """
    check_log_names()  # a misspelt TORCHKILN_LOGS name fails here, not inside a capture
    if isinstance(fn, torch.nn.Module):
        captured = CapturedFunction(
            _call_module,
            backend,
            fullgraph=fullgraph,
            dynamic=dynamic,
            recompile_limit=recompile_limit,
            capture_scalar_outputs=capture_scalar_outputs,
            strict=strict,
        )
        captured.__name__ = type(fn).__name__
        captured._module = fn
        return CapturedModule(fn, captured)
    if not callable(fn):
        raise TypeError(f"capture expects a function, method or nn.Module, got {type(fn).__name__}")
    captured = CapturedFunction(
        fn,
        backend,
        fullgraph=fullgraph,
        dynamic=dynamic,
        recompile_limit=recompile_limit,
        capture_scalar_outputs=capture_scalar_outputs,
        strict=strict,
    )
    captured._eager = trace_rules.is_disabled(fn)  # marked disable: it always runs as it is
    return captured
