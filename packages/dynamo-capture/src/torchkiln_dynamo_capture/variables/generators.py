"""``contextlib.contextmanager`` blocks and other standard context managers made in the frame.

A ``with helper(...)`` block, where ``helper`` is a generator function decorated with
``contextlib.contextmanager``, is traced the way CPython runs it: entering the block runs the
generator symbolically up to its ``yield`` (the value bound by ``as``), and leaving it runs the
generator from there to its end. So its own ``with`` blocks (grad mode), tensor operations,
``try/finally`` and side effects land in the graph and in the side-effect log in eager's order,
and the block costs no graph break. The generator's frame is a suspended child translator: its
``YIELD_VALUE`` raises ``Suspend`` (defined here) and the frame is resumed by running it again.

Only the normal path is traced (as for every block): an exception inside the block makes capture
fail there, so the block runs in Python. ``contextlib.nullcontext`` and ``contextlib.suppress``
need no tracing: the first binds its value, the second does nothing on the normal path.
"""

from __future__ import annotations

import contextlib
import inspect
import types

from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker
from .ctx import ContextExitVariable, ContextManagerVariable, _no_exit

_DONE = object()


class Suspend(Exception):  # noqa: N818 - a control transfer, not an error
    """A generator run by ``enter_generator_context`` reached ``yield`` (the translator raises it
    at YIELD_VALUE): the value it yields."""

    def __init__(self, value):
        self.value = value


class GeneratorContextVariable(ContextManagerVariable):
    """What calling a contextmanager-decorated function returns: not entered yet."""

    def __init__(self, func: VariableTracker, args: list, kwargs: dict):
        self.func, self.args, self.kwargs = func, list(args), dict(kwargs)

    def python_type(self):
        return contextlib._GeneratorContextManager

    def enter(self, tx):
        return enter_generator_context(tx, self)

    def __repr__(self):
        return f"GeneratorContextVariable({self.func})"


class NullContextVariable(ContextManagerVariable):
    """``contextlib.nullcontext(value)`` made in the frame (its value may be a tensor)."""

    def __init__(self, value: VariableTracker):
        self.value = value

    def python_type(self):
        return contextlib.nullcontext

    def enter(self, tx):
        return enter_generator_context(tx, self)


def _sample():
    yield


#: the code of the wrapper ``contextlib.contextmanager`` returns (its name and module are the
#: decorated function's, copied by functools.wraps; its code object is one for all of them)
_HELPER_CODE = contextlib.contextmanager(_sample).__code__


def is_contextmanager_function(fn) -> bool:
    """Whether ``fn`` is the wrapper ``contextlib.contextmanager`` put around a generator function."""
    return (
        isinstance(fn, types.FunctionType)
        and fn.__code__ is _HELPER_CODE
        and inspect.isgeneratorfunction(getattr(fn, "__wrapped__", None))
    )


def is_contextmanager_helper(func: VariableTracker) -> bool:
    """``func`` (a UserFunctionVariable) is contextlib's wrapper: a real one, or one that
    ``contextlib.contextmanager`` made in the frame (a generator function defined there)."""
    fn = getattr(func, "fn", None)
    if fn is not None:
        return is_contextmanager_function(fn)
    return getattr(func, "code", None) is _HELPER_CODE


def contextmanager_call(
    tx, func: VariableTracker, args: list, kwargs: dict
) -> GeneratorContextVariable:
    """Calling the wrapper: the generator function and its arguments, entered by BEFORE_WITH."""
    tx.out.traced_contextmanagers += 1  # a break while it exists makes capture retry without
    if func.fn is not None:
        return GeneratorContextVariable(tx.wrap(func.fn.__wrapped__, None), args, kwargs)
    cell = func.closure[func.code.co_freevars.index("func")]
    return GeneratorContextVariable(cell.get(tx), args, kwargs)


def enter_generator_context(tx, ctx: VariableTracker):
    """Enter ``ctx`` (a GeneratorContextVariable or NullContextVariable): (exit callable, value)."""
    if isinstance(ctx, NullContextVariable):
        return ContextExitVariable(lambda: None, _no_exit), ctx.value
    func = ctx.func
    if not hasattr(func, "code"):
        raise Unsupported(f"a contextmanager over {type(func).__name__}")
    frame = tx.child_frame(
        func, [*([func.self_var] if func.self_var is not None else []), *ctx.args], ctx.kwargs
    )
    frame.suspended = True
    value = _resume(frame)
    if value is _DONE:
        raise Unsupported(
            f"the contextmanager {func.name} did not yield (eager raises RuntimeError)"
        )

    def leave():
        frame.push(ConstantVariable(None))  # what ``yield`` evaluates to when the block ends
        if _resume(frame) is not _DONE:
            raise Unsupported(
                f"the contextmanager {func.name} yielded twice (eager raises RuntimeError)"
            )

    return ContextExitVariable(leave), value


def _resume(frame):
    """Run the generator's frame to its next ``yield`` (the value) or its end (``_DONE``)."""
    try:
        frame.run()
    except Suspend as s:
        return s.value
    return _DONE


__all__ = [
    "GeneratorContextVariable",
    "NullContextVariable",
    "Suspend",
    "contextmanager_call",
    "enter_generator_context",
    "is_contextmanager_function",
    "is_contextmanager_helper",
]
