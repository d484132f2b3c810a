"""The heap that was there before a compile began, kept out of the garbage collector's scans.

A compile makes hundreds of thousands of short-lived objects (fake tensors, fx nodes, pytree
specs, sympy expressions), so CPython's collector runs often, and each full (generation 2)
collection walks every object of the process: the model, torch, transformers and their
modules. On a BERT-base training step those full collections were 1.3 of the compile's 8.5
CPU seconds. ``gc.freeze()`` moves the objects alive at the start into the permanent
generation, which collections skip; ``gc.unfreeze()`` at the end gives them back to the oldest
generation. Nothing is kept that would have been freed, only later: a cycle that became
garbage before the compile began waits for the first full collection after it.

Only the outermost compile freezes, and only when nothing else has frozen objects (a caller
that uses ``gc.freeze`` itself, or another thread's compile in progress, is left alone: its
objects stay as it froze them).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Within: the objects alive on entry are not scanned by the garbage collector."""
    if gc.get_freeze_count():
        yield  # nested, another thread's compile, or the caller's own freeze: not ours
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
