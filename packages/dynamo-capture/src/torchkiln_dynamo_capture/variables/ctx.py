"""``with`` blocks: grad mode (no_grad / enable_grad / set_grad_enabled) and autocast.

Entering records a node that switches the mode inside the graph and switches it for the fake
tensors too (so requires_grad and dtypes propagate as in eager); the exit callable undoes both.
A context manager made during capture (``ContextManagerVariable``: ``contextlib.contextmanager``
blocks and ``nullcontext`` in generators.py, ``torch.set_grad_enabled(mode)``) enters itself.

An autocast block open at a graph break is handed to CPython as TorchDynamo does: each graph is
self-contained (the graph before the break exits the block at its end, the continuation's graph
enters it again at its start, so tracing below capture sees the block's dtypes), and between
them the block is really open in Python: the ``run`` function enters it after the graph
(``OpenAutocast``), and the continuation receives an ``AutocastExit``, the real ``__exit__``
that restores the state from before the block.
"""

from __future__ import annotations

import contextlib

import torch
from torch.amp.autocast_mode import _enter_autocast, _exit_autocast

from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker


class ContextExitVariable(VariableTracker):
    """The ``__exit__`` that BEFORE_WITH pushes; called with (None, None, None) on normal exit.

    ``real_exit`` is a real callable doing the same, for when a graph break hands the open ``with``
    block to CPython (None: this context cannot be handed over).
    """

    def __init__(self, undo, real_exit=None):
        self.undo = undo
        self.real_exit = real_exit

    def call(self, tx, args, kwargs):
        self.undo()
        return ConstantVariable(None)


class GradModeExit:
    """A real ``__exit__`` restoring grad mode: what an open no_grad/enable_grad block becomes when a
    graph break hands it to CPython. One instance per mode, so guards can check it by identity."""

    def __init__(self, prev: bool):
        self.prev = prev

    def __call__(self, exc_type=None, exc=None, tb=None):
        torch._C._set_grad_enabled(self.prev)
        return False

    def __repr__(self):
        return f"GradModeExit(prev={self.prev})"


GRAD_EXITS = {True: GradModeExit(True), False: GradModeExit(False)}


class AutocastExit:
    """A real ``__exit__`` of an autocast block handed to CPython by a graph break: restores the
    device's autocast state from before the block, as ``torch.autocast.__exit__`` does. One
    instance per (device, state before), so guards can check it by identity."""

    _made: dict[tuple, AutocastExit] = {}

    def __init__(self, device: str, prev: bool, prev_dtype: torch.dtype, prev_cache: bool):
        self.device, self.prev, self.prev_dtype, self.prev_cache = (
            device,
            prev,
            prev_dtype,
            prev_cache,
        )

    @classmethod
    def of(cls, device: str, prev: bool, prev_dtype: torch.dtype, prev_cache: bool) -> AutocastExit:
        key = (device, prev, prev_dtype, prev_cache)
        if key not in cls._made:
            cls._made[key] = cls(*key)
        return cls._made[key]

    def __call__(self, exc_type=None, exc=None, tb=None):
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(self.device, self.prev)
        torch.set_autocast_dtype(self.device, self.prev_dtype)
        torch.set_autocast_cache_enabled(self.prev_cache)
        return False

    def __repr__(self):
        return f"AutocastExit({self.device!r}, prev={self.prev}, prev_dtype={self.prev_dtype})"


class OpenAutocast:
    """An autocast block open in the graph under construction: ``node`` is its ``_enter_autocast``
    (with ``args``); ``handed_in``: the block was entered in Python before this graph (a
    continuation's), and this is its real exit."""

    def __init__(self, args: tuple, node, handed_in: AutocastExit | None = None):
        self.args, self.node, self.handed_in = args, node, handed_in


_AUTOCAST_DEVICES = ("cpu", "cuda")


def autocast_state() -> tuple:
    """The process's autocast state (per device, cache flag, nesting depth), which a capture
    changes for real while tracing a block; ``restore_autocast_state`` puts it back."""
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    devices = tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES
    )
    return devices, torch.is_autocast_cache_enabled(), depth


def restore_autocast_state(state: tuple) -> None:
    devices, cache, depth = state
    for d, enabled, dtype in devices:
        torch.set_autocast_enabled(d, enabled)
        torch.set_autocast_dtype(d, dtype)
    torch.set_autocast_cache_enabled(cache)
    now = torch.autocast_increment_nesting()  # the depth, one above it while probing
    while now > depth + 1:
        now = torch.autocast_decrement_nesting()
    while now < depth + 1:
        now = torch.autocast_increment_nesting()
    torch.autocast_decrement_nesting()


def autocast_exit_variable(tx, value: AutocastExit) -> ContextExitVariable:
    """A continuation's handed-in autocast block: entered again at the start of its graph (the
    block is open in Python, as the guards on the autocast state check); exiting it exits in the
    graph and, after the graph, in Python with ``value``."""
    out = tx.out
    args = (
        value.device,
        torch.get_autocast_dtype(value.device),
        torch.is_autocast_enabled(value.device),
        torch.is_autocast_cache_enabled(),
    )
    root = out.root_graph
    where = (
        root.inserting_after(out._last_placeholder)
        if out._last_placeholder
        else root.inserting_before(None)
    )
    with where:
        node = root.call_function(_enter_autocast, args)
    node.meta["example_value"] = None
    block = OpenAutocast(args, node, value)
    out.open_autocasts.append(block)

    def undo():
        value()
        n = out.graph.call_function(_exit_autocast, (node,))
        n.meta["example_value"] = None
        out.open_autocasts.remove(block)
        out.python_autocast_exits.append(value)

    return ContextExitVariable(undo, value)


def _no_exit(exc_type=None, exc=None, tb=None):
    return False


def _set_grad(tx, enabled: bool):
    node = tx.out.graph.call_function(torch._C._set_grad_enabled, (enabled,))
    node.meta["example_value"] = None
    torch._C._set_grad_enabled(enabled)


class ContextManagerVariable(VariableTracker):
    """A context manager made during capture, which knows how to enter itself."""

    def enter(self, tx) -> tuple[ContextExitVariable, VariableTracker]:
        """Enter the block: (the exit callable BEFORE_WITH pushes, the value bound by ``as``)."""
        raise NotImplementedError


class GradModeSetVariable(ContextManagerVariable):
    """What ``torch.set_grad_enabled(mode)`` returns: the mode is already set; exiting restores."""

    def __init__(self, prev: bool):
        self.prev = prev

    def enter(self, tx):
        return ContextExitVariable(
            lambda: _set_grad(tx, self.prev), GRAD_EXITS[self.prev]
        ), ConstantVariable(None)


def set_grad_enabled(tx, mode: bool) -> VariableTracker:
    prev = torch.is_grad_enabled()
    _set_grad(tx, mode)
    return GradModeSetVariable(prev)


def enter_context(tx, ctx: VariableTracker):
    """Enter ``ctx`` symbolically; returns (exit callable, value bound by ``as``)."""
    if isinstance(ctx, ContextManagerVariable):
        return ctx.enter(tx)
    obj = ctx.real_value()
    if isinstance(obj, (torch.no_grad, torch.enable_grad, torch.set_grad_enabled)):
        prev = torch.is_grad_enabled()
        target = {torch.no_grad: False, torch.enable_grad: True}.get(type(obj))
        if target is None:
            target = obj.mode if hasattr(obj, "mode") else prev
        _set_grad(tx, target)
        return ContextExitVariable(lambda: _set_grad(tx, prev), GRAD_EXITS[prev]), ConstantVariable(
            None
        )
    if isinstance(obj, contextlib.nullcontext):
        return ContextExitVariable(lambda: None, _no_exit), tx.wrap(obj.enter_result, None)
    if isinstance(obj, contextlib.suppress):
        # only the normal path is traced: nothing to suppress there; handed over, it is itself
        return ContextExitVariable(lambda: None, obj.__exit__), ConstantVariable(None)
    if isinstance(obj, torch.autocast):
        args = (obj.device, obj.fast_dtype, obj._enabled, obj._cache_enabled)
        node = tx.out.graph.call_function(_enter_autocast, args)
        node.meta["example_value"] = None
        obj.__enter__()
        real_exit = AutocastExit.of(
            obj.device, obj.prev, obj.prev_fastdtype, obj.prev_cache_enabled
        )
        block = OpenAutocast(args, node)
        tx.out.open_autocasts.append(block)

        def undo():
            obj.__exit__(None, None, None)
            n = tx.out.graph.call_function(_exit_autocast, (node,))
            n.meta["example_value"] = None
            tx.out.open_autocasts.remove(block)

        return ContextExitVariable(undo, real_exit), ConstantVariable(obj)
    raise Unsupported(
        f"with-block over {type(obj).__name__}",
        "only torch.no_grad/enable_grad/set_grad_enabled/autocast are supported",
    )
