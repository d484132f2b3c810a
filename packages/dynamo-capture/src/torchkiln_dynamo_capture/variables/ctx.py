"""``with`` blocks: grad mode (no_grad / enable_grad / set_grad_enabled) and autocast.

Entering records a node that switches the mode inside the graph and switches it for the fake
tensors too (so requires_grad and dtypes propagate as in eager); the exit callable undoes both.
A context manager made during capture (``ContextManagerVariable``: ``contextlib.contextmanager``
blocks and ``nullcontext`` in generators.py, ``torch.set_grad_enabled(mode)``) enters itself.
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
        return ContextExitVariable(lambda: _set_grad(tx, self.prev), GRAD_EXITS[self.prev]), ConstantVariable(None)


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
        return ContextExitVariable(lambda: _set_grad(tx, prev), GRAD_EXITS[prev]), ConstantVariable(None)
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

        def undo():
            obj.__exit__(None, None, None)
            n = tx.out.graph.call_function(_exit_autocast, (node,))
            n.meta["example_value"] = None

        return ContextExitVariable(undo), ConstantVariable(obj)
    raise Unsupported(f"with-block over {type(obj).__name__}", "only torch.no_grad/enable_grad/set_grad_enabled/autocast are supported")
