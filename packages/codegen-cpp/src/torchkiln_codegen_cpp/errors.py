"""Typed errors of the C++ code generator."""

from __future__ import annotations


class CodegenError(Exception):
    """Generating or building C++ for a kernel failed.

    ``source_path`` is the .cpp file that failed to build (None when generation failed before a
    file was written); ``stderr_tail`` is the last lines the compiler printed.
    """

    def __init__(self, message: str, *, source_path: str | None = None, stderr_tail: str = ""):
        self.source_path = source_path
        self.stderr_tail = stderr_tail
        full = message
        if source_path:
            full += f"\n  source: {source_path}"
        if stderr_tail:
            full += "\n  compiler said:\n" + "\n".join(
                "    " + ln for ln in stderr_tail.splitlines()
            )
        super().__init__(full)


class UnsupportedOp(CodegenError, AttributeError):
    """A kernel body called an op the C++ backend does not implement (also an AttributeError,
    so ``hasattr(handler, op)`` answers False)."""
