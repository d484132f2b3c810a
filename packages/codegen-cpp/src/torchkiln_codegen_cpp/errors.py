"""Typed errors of the C++ code generator."""

from __future__ import annotations

from torchkiln_loop_ir.errors import CodegenError as _BaseCodegenError


class CodegenError(_BaseCodegenError):
    """Generating or building C++ for a kernel failed (loop-IR's ``CodegenError``).

    ``source_path`` is the .cpp file that failed to build (None when generation failed before a
    file was written); ``stderr_tail`` is the last lines the compiler printed.
    """

    def __init__(self, message: str, *, source_path: str | None = None, stderr_tail: str = ""):
        super().__init__(message, source_path, tool_output=stderr_tail)

    @property
    def source_path(self) -> str | None:
        return self.path

    @property
    def stderr_tail(self) -> str:
        return self.tool_output


class UnsupportedOp(CodegenError, AttributeError):
    """A kernel body called an op the C++ backend does not implement (also an AttributeError,
    so ``hasattr(handler, op)`` answers False)."""
