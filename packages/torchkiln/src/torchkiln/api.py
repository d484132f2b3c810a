"""``torchkiln.compile``, ``explain`` and ``report``: the user-facing entry points.

``compile`` mirrors ``torch.compile``: capture (torchkiln-dynamo-capture) turns each frame into FX
graphs and hands them to a backend; by default that is our pipeline (``pipeline.make_backend``).
Internal failures never break the user's program unless ``options={"strict": True}``: a graph
the pipeline cannot compile runs eagerly, and if capture itself fails the whole function does,
each time with one warning and a record in ``report(compiled).eager_fallbacks``.
``reset()`` forgets what every live compiled function has compiled, as ``torch.compiler.reset()``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torchkiln_dynamo_capture
from torchkiln_dynamo_capture import ModuleProxy
from torchkiln_guards.logs import check_log_names

from torchkiln.debug_dir import function_name, write_guards
from torchkiln.errors import (
    BackendCompilerFailed,
    FailedAfterEffects,
    LayerUnavailable,
    TorchkilnError,
)
from torchkiln.options import CompileOptions, resolve_options
from torchkiln.pipeline import make_backend, one_line
from torchkiln.report import CompileReport, EagerFallback, ReportRecorder


def _eager_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """backend="eager": capture only, the FX graph runs as traced."""
    return gm.forward


#: backend names that mean our pipeline ("inductor" too: swapping torch.compile for
#: torchkiln.compile keeps the same kind of compiler, ours)
PIPELINE_BACKENDS = (None, "torchkiln", "inductor")


def _choose_backend(
    backend: Any, options: CompileOptions, recorder: ReportRecorder, function: str = "graph"
) -> Callable[..., Any]:
    if backend in PIPELINE_BACKENDS:
        return make_backend(options, recorder, function)
    if backend == "eager":
        return _eager_backend
    if callable(backend):
        return backend
    raise ValueError(
        "torchkiln: backend must be None, 'torchkiln', 'inductor' (both our pipeline), 'eager' "
        f"or a callable, not {backend!r}"
    )


def _with_mode_and_options(
    backend: Callable[..., Any], mode: str | None, options: Any
) -> Callable[..., Any]:
    """A user's backend callable, called as torch.compile calls one: with ``mode=`` when a mode
    other than the default was given and ``options=`` when options were, nothing otherwise."""
    kwargs: dict[str, Any] = {}
    if mode and mode != "default":
        kwargs["mode"] = mode
    if options:
        kwargs["options"] = options
    if not kwargs:
        return backend
    return functools.partial(backend, **kwargs)


def _capture(
    fn: Any,
    backend: Callable[..., Any],
    options: CompileOptions,
    fullgraph: bool,
    dynamic: bool | None,
) -> Callable[..., Any]:
    capture = getattr(torchkiln_dynamo_capture, "capture", None)
    if capture is None:
        raise LayerUnavailable("torchkiln_dynamo_capture does not provide capture yet")
    # passed only when asked for: a capture layer without the option (or a stand-in) still works
    extra: dict[str, bool] = {}
    if options.capture_scalar_outputs:
        extra["capture_scalar_outputs"] = True
    if options.strict:  # capture's own internal errors raise too (dynamo-capture 0.9.7)
        extra["strict"] = True
    return capture(
        fn,
        backend,
        fullgraph=fullgraph,
        dynamic=dynamic,
        recompile_limit=options.recompile_limit,
        **extra,
    )


class _Runner:
    """Calls the captured function; if capture itself fails, runs ``fn`` eagerly from then on."""

    def __init__(
        self,
        fn: Any,
        backend: Callable[..., Any],
        options: CompileOptions,
        fullgraph: bool,
        dynamic: bool | None,
        recorder: ReportRecorder,
    ) -> None:
        self.fn = fn
        self.options = options
        self.fullgraph = fullgraph
        self.recorder = recorder
        self._backend, self._dynamic = backend, dynamic  # to capture afresh after reset()
        self.captured: Callable[..., Any] | None = None
        try:
            self.captured = _capture(fn, backend, options, fullgraph, dynamic)
        except Exception as error:  # noqa: BLE001
            self._fail("capture could not wrap the function", error)

    def _fail(self, stage: str, error: Exception) -> None:
        reason = f"{stage}: {one_line(error)}"
        if self.options.strict or isinstance(error, BackendCompilerFailed):
            raise error
        warnings.warn(f"torchkiln: {reason}; running this function eagerly", stacklevel=4)
        self.recorder.add_fallback(EagerFallback(-1, 0, reason))
        self.captured = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        captured = self.captured
        if captured is None:
            return self.fn(*args, **kwargs)
        if isinstance(captured, ModuleProxy):
            # capture's proxy of the module: its forward, since its __call__ would run global
            # module hooks once more (CompiledModule, the proxy users hold, runs them)
            captured = captured.forward
        try:
            result = captured(*args, **kwargs)
            if self.recorder.has_pending_dumps:
                self._dump_guards()
            return result
        except Exception as error:
            if self.fullgraph or self.options.strict or isinstance(error, TorchkilnError):
                raise
            # The user's own code raised (after a graph break code runs in CPython; a graph's
            # ops raise only as eager would, the pipeline sees to it): that is the program's
            # behaviour, re-raised unchanged.
            if _raised_by_user_code(error, self._continuation_codes()):
                raise
            # An internal error after the function may have had effects (a graph wrote its
            # inputs, Python code of the function ran): re-running it eagerly would repeat them.
            if _may_have_had_effects(error):
                self._fail("the compiled function failed", error)
                raise FailedAfterEffects(
                    f"torchkiln: {getattr(self.fn, '__name__', 'the function')} failed inside torchkiln "
                    f"after it may have had effects ({one_line(error)}); not re-run eagerly, which "
                    "would repeat them; it runs eagerly from the next call"
                ) from error
            failed = error
        # Capture failed before anything of the function ran. If eager raises too, it was the
        # user's own error: eager's propagates (outside the except block: not chained to
        # capture's) and compiling goes on. Otherwise: warn once and run eagerly from now on.
        result = self.fn(*args, **kwargs)
        self._fail("capture failed", failed)
        return result

    def _dump_guards(self) -> None:
        """Write the guards of graphs compiled during this call into their debug-dir folders
        (capture compiles a graph's guards after the backend returned)."""
        try:
            write_guards(self._functions(), self.recorder.take_pending_dumps())
        except Exception as error:  # noqa: BLE001 - a debug dump never breaks the program
            warnings.warn(
                f"torchkiln: could not write guards to the debug dir: {one_line(error)}",
                stacklevel=3,
            )

    def reset(self) -> None:
        """Forget every compiled entry: capture's cache (guarded entries, continuations, automatic
        dynamic sizes), the eager decision and the report; the next call captures afresh."""
        self.recorder.clear()
        self.captured = None
        try:
            self.captured = _capture(
                self.fn, self._backend, self.options, self.fullgraph, self._dynamic
            )
        except Exception as error:  # noqa: BLE001
            self._fail("capture could not wrap the function", error)

    def _inner(self) -> Any:
        """Capture's own captured function (behind a module proxy), None when there is none."""
        return getattr(self.captured, "_captured", self.captured)

    def _continuation_codes(self) -> Callable[[Any], bool]:
        """Whether a code object is one of capture's continuations or a break's step: the
        program's own code around a graph break, run as eager runs it, whatever file it is in."""
        codes = getattr(getattr(self._inner(), "ctx", None), "codes", None)
        if codes is None:
            return lambda code: False
        return codes.runs_the_program

    def _functions(self) -> list[Any]:
        """The captured function and every continuation or callee its graph breaks created."""
        inner = self._inner()
        ctx = getattr(inner, "ctx", None)
        return list(ctx.functions) if ctx is not None else [inner] if inner is not None else []

    def capture_fallbacks(self) -> list[EagerFallback]:
        """Capture's own decisions to run a frame eagerly (a construct it could not split at),
        which it makes without raising: read from the captured wrappers."""
        out = []
        for fn in self._functions():
            unsupported = getattr(fn, "unsupported", None)
            if unsupported is not None:
                name = getattr(fn, "__name__", "?")
                out.append(
                    EagerFallback(-1, 0, f"capture ran {name} eagerly: {one_line(unsupported)}")
                )
        return out

    def graph_breaks(self) -> list[str]:
        breaks = getattr(self._inner(), "graph_breaks", None)
        if callable(breaks):
            breaks = breaks()
        return [str(b).splitlines()[0] for b in breaks] if breaks else []


def _frames(error: BaseException) -> list[Any]:
    """The frames of ``error``'s traceback, innermost first."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames[::-1]


def _frame_kind(frame: Any) -> str:
    """ "graph" (what raises only as eager would: an FX graph's forward, the pipeline's graph
    runner, a guard check binding the arguments), "library", "torchkiln" (our code, generated or
    not), or "user"."""
    module = frame.f_globals.get("__name__") or ""
    filename = frame.f_code.co_filename
    if module == "torchkiln.pipeline" and frame.f_code.co_name == "run_graph":
        return "graph"
    if filename.endswith(("fx/graph_module.py", "fx\\graph_module.py")) or filename.startswith(
        "<eval_with_key"
    ):
        return "graph"
    if filename == "<torchkiln guards>":  # raises only for arguments that do not fit, as fn would
        return "graph"
    root = module.split(".")[0]
    if root in _LIBRARIES or root in sys.stdlib_module_names:
        return "library"
    if root.startswith("torchkiln") or filename.startswith("<torchkiln"):
        return "torchkiln"
    return "user"


_LIBRARIES = frozenset({"torch", "triton", "sympy", "bytecode", "networkx", "numpy"})


def _raised_by_user_code(
    error: BaseException, continuation: Callable[[Any], bool] = lambda code: False
) -> bool:
    """Whether ``error`` came from the user's program: the innermost frame of its traceback that
    is not a library's (torch, triton, ...) is the user's code, a graph of the user's ops that
    raised as eager does, or the program's own code around a graph break (``continuation(code)``:
    a break inside a library's function, transformers' or ``nn.Linear.forward``, runs the rest
    of it as a step or continuation whose file is the library's)."""
    for frame in _frames(error):
        if continuation(frame.f_code):
            return True
        kind = _frame_kind(frame)
        if kind != "library":
            return kind in ("user", "graph")
    return False


def _may_have_had_effects(error: BaseException) -> bool:
    """Whether anything the user can see may have happened before ``error``: its traceback
    passes through the function's compiled code (``run``: a graph was called, side effects
    replayed, a continuation entered) or through the user's own code. An error inside capture
    or a guard check alone has had none."""
    return any(
        _frame_kind(f) in ("user", "graph")
        or f.f_code.co_filename.startswith("<torchkiln generated")
        for f in _frames(error)[:-1]  # the outermost frame is _Runner.__call__ itself
    )


class CompiledFunction:
    """What ``torchkiln.compile(fn)`` returns for a function: call it like ``fn``."""

    def __init__(self, fn: Callable[..., Any], runner: _Runner) -> None:
        functools.update_wrapper(self, fn)
        self._torchkiln_runner = runner
        self._orig_fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._torchkiln_runner(*args, **kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # A compiled function stored on a class still binds like a method.
        return self if instance is None else functools.partial(self, instance)


class CompiledModule(ModuleProxy):
    """What ``torchkiln.compile(module)`` returns: capture's module proxy (``ModuleProxy``:
    parameters, buffers, ``state_dict``, attributes, ``training`` and indexing are the original
    module's; hooks registered on it run around the compiled forward, as on torch.compile's
    wrapper) whose forward is the runner, with its eager fallback policy."""

    def __init__(self, module: torch.nn.Module, runner: _Runner) -> None:
        super().__init__(module, runner)
        self.__dict__["_torchkiln_runner"] = runner


#: every live compiled function's runner, for reset() (weak: compiling keeps nothing alive)
_LIVE_RUNNERS: weakref.WeakSet[_Runner] = weakref.WeakSet()


def compile(
    model: Any = None,
    *,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    backend: Any = None,
    mode: str | None = None,
    options: CompileOptions | dict[str, Any] | None = None,
    name: str | None = None,
    disable: bool = False,
    recompile_limit: int | None = None,
    isolate_recompiles: bool = False,
    shapes_spec: Any = None,
) -> Any:
    """Compile a function or ``nn.Module`` like ``torch.compile`` (same arguments, same meaning);
    usable as ``@compile`` or ``@compile(...)``.

    fullgraph: a graph break raises instead of splitting the function.
    dynamic: None (static first, symbolic dims at the first recompile), True (symbolic from the
        start), False (always specialize).
    backend: None/"torchkiln"/"inductor" (our pipeline), "eager" (capture, then run the FX
        graphs), or a torch.compile-style callable ``(gm, example_inputs) -> callable``, called
        with ``mode=``/``options=`` as torch.compile calls it (capture only).
    mode: None (= "default"), "default", "reduce-overhead" (CUDA graphs on CUDA), "max-autotune"
        (autotuning and CUDA graphs) or "max-autotune-no-cudagraphs".
    options: a dict or ``CompileOptions``: our fields (``strict``, ``max_fusions``,
        ``recompile_limit``, ...) and the Inductor names with a torchkiln meaning
        (``max_autotune``, ``triton.cudagraphs``, ...: ``options.INDUCTOR_OPTIONS``); other names
        are ignored with one warning. Unlike torch.compile, ``mode`` and ``options`` may be
        given together (explicit options win over the mode's settings).
    name: what the graphs' debug-dir and repro folders are called (default: the function's
        ``__name__``, a module's class name).
    disable: return ``model`` unchanged (torch.compile's no-op switch).
    recompile_limit: how many guarded entries a captured frame may hold before it runs eagerly
        (None: ``options``' ``recompile_limit``, default 8); wins over the options' field.
    isolate_recompiles: accepted for torch.compile's signature; a torchkiln compiled function
        always keeps its own entries (True's meaning), so either value behaves the same.
    shapes_spec: not supported: a value other than None is ignored with a warning (shapes are
        chosen by ``dynamic`` and ``mark_dynamic``).
    Returns a ``CompiledFunction`` (functions) or ``CompiledModule`` (modules);
    ``torchkiln.report(result)`` says what was compiled.
    """
    if model is None:
        return functools.partial(
            _compile_or_refuse_none,
            fullgraph=fullgraph,
            dynamic=dynamic,
            backend=backend,
            mode=mode,
            options=options,
            name=name,
            disable=disable,
            recompile_limit=recompile_limit,
            isolate_recompiles=isolate_recompiles,
            shapes_spec=shapes_spec,
        )
    if disable:
        return model
    if not callable(model):
        raise TypeError(
            f"torchkiln.compile expects a function or nn.Module, not {type(model).__name__}"
        )
    check_log_names()
    if shapes_spec is not None:
        warnings.warn(
            "torchkiln: ignoring shapes_spec (not supported): shapes follow dynamic= "
            "and torchkiln.mark_dynamic",
            stacklevel=2,
        )
    recorder = ReportRecorder()
    if backend in PIPELINE_BACKENDS:
        resolved = resolve_options(options, mode, stacklevel=3)
        chosen = _choose_backend(backend, resolved, recorder, function_name(model, name))
    else:
        # mode and options belong to that backend (torch.compile does not check them): ours
        # only reads its own fields (strict, recompile_limit) from them, without warnings.
        own = options if isinstance(options, CompileOptions) else None
        if own is None and isinstance(options, dict):
            own = resolve_options(options, None, warn_ignored=False)
        resolved = own or CompileOptions()
        chosen = _choose_backend(backend, resolved, recorder)
        if callable(backend):
            chosen = _with_mode_and_options(chosen, mode, options)
    if recompile_limit is not None:
        resolved = dataclasses.replace(resolved, recompile_limit=recompile_limit)
    runner = _Runner(model, chosen, resolved, fullgraph, dynamic, recorder)
    _LIVE_RUNNERS.add(runner)
    if isinstance(model, torch.nn.Module):
        return CompiledModule(model, runner)
    return CompiledFunction(model, runner)


def _compile_or_refuse_none(model: Any, **kwargs: Any) -> Any:
    """The decorator ``compile(...)`` returns: ``compile(model, ...)``; None is an error there."""
    if model is None:
        raise TypeError("torchkiln.compile(...)(model): model can't be None")
    return compile(model, **kwargs)


def reset() -> None:
    """Forget everything compiled in this process, as ``torch.compiler.reset()`` does for
    torch.compile: every live compiled function drops its capture cache entries, continuations
    and report, and compiles afresh on its next call. Files on disk (the code generators'
    caches) stay, as torch's do. ``torch.compiler.reset()`` calls this too once
    ``torchkiln.backend`` has been used by torch.compile (torch resets the backends it cached)."""
    for runner in list(_LIVE_RUNNERS):
        runner.reset()


def explain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``explain(fn)(*args)``: capture's account of how ``fn`` splits into graphs (no compile)."""
    explain_fn = getattr(torchkiln_dynamo_capture, "explain", None)
    if explain_fn is None:
        raise LayerUnavailable("torchkiln_dynamo_capture does not provide explain yet")
    target = fn._orig_mod if isinstance(fn, CompiledModule) else getattr(fn, "_orig_fn", fn)
    return explain_fn(target)


def report(compiled: Any) -> CompileReport:
    """A snapshot of what ``compiled`` (from ``torchkiln.compile``) has compiled so far."""
    runner = getattr(compiled, "_torchkiln_runner", None)
    if runner is None:
        raise TypeError(
            "torchkiln.report expects the result of torchkiln.compile, "
            f"not {type(compiled).__name__}"
        )
    return runner.recorder.snapshot(runner.graph_breaks(), runner.capture_fallbacks())
