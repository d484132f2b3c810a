"""Typed errors of the capture layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for annotations only: the errors module stays a leaf every module imports
    from .breaks import BreakPoint


class Unsupported(RuntimeError):
    """Capture met a construct it cannot put in the graph.

    Carries the construct (what was met), the user's file and line, and a hint saying what to change.
    With ``fullgraph=True`` it reaches the user; otherwise the function runs eagerly with a warning.
    A ``RuntimeError``, as torch.compile's own error for a break under ``fullgraph=True`` is, so
    code that catches that keeps working when torchkiln replaces torch.compile.
    """

    def __init__(
        self, construct: str, hint: str = "", filename: str | None = None, lineno: int | None = None
    ):
        self.construct = construct
        self.hint = hint
        self.filename = filename
        self.lineno = lineno
        #: where the top frame may be split for this failure (set by the translator), and whether
        #: it happened inside an inlined call (then the call itself is the break)
        self.break_point: BreakPoint | None = None
        self.in_callee = False
        #: the failure happened while a contextmanager was traced (set by capture_frame)
        self.traced_contextmanager = False
        #: (translator, name, getter): the failure happened in a @property getter inlined for
        #: ``obj.name`` read by that translator's LOAD_ATTR (the break reads it with the getter captured)
        self.property_read: tuple | None = None
        super().__init__(construct)

    def located(self, filename: str, lineno: int | None) -> Unsupported:
        """Fill in the user's location if not yet known (the innermost frame wins)."""
        if self.filename is None:
            self.filename, self.lineno = filename, lineno
        return self

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno}: " if self.filename else ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}unsupported: {self.construct}{hint}"


class BackendError(Exception):
    """Base of the errors a backend raises on purpose for the caller (a compiler's strict mode):
    capture lets them through instead of running the function eagerly."""


class RecompileLimitExceeded(RuntimeWarning):
    """Warning category used when a captured function hits its recompile limit."""


class FailOnRecompileLimitHit(RuntimeError):
    """A ``fullgraph=True`` function hit its recompile limit: raised, not run eagerly, as
    torch.compile raises its error of the same name (a full graph was asked for every call)."""
