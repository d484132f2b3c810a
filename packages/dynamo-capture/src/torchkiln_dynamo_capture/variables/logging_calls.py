"""Logging calls inside captured code: run after the graph as a recorded side effect.

A ``logger.warning_once(...)`` in a model's forward (transformers warns about its config there)
used to break the graph, splitting one training step into several graphs. Its only effect is the
record it emits, so capture records the call with its arguments and the generated ``run`` makes
it after the graph, in program order with the other side effects (``trace_rules.
is_reorderable_logging`` says which callables qualify). The arguments must be known at capture
time (strings, numbers, static shapes): a tensor argument would have to be read after the graph,
so such a call still runs in Python between two graphs.
"""

from __future__ import annotations

import types

from ..exc import Unsupported
from .base import ConstantVariable, VariableTracker


def replay_logging_call(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    """Record ``fn(*args, **kwargs)`` to run after the graph; its value (None) is known."""
    if not all(a.is_python_constant() for a in args) or not all(
        v.is_python_constant() for v in kwargs.values()
    ):
        name = getattr(fn, "__qualname__", None) or repr(fn)
        raise Unsupported(
            f"calling {name} with arguments not known at capture time (a tensor, a symbolic size)",
            "the log call runs in Python between two graphs; log constants (or .item() "
            "outside the compiled function) to keep one graph",
        )
    tx.out.side_effects.call(
        fn,
        [a.as_python_constant() for a in args],
        {k: v.as_python_constant() for k, v in kwargs.items()},
    )
    return ConstantVariable(None)


def bound(fn, owner):
    """``fn`` bound to ``owner`` (None: ``fn`` itself)."""
    return fn if owner is None else types.MethodType(fn, owner)
