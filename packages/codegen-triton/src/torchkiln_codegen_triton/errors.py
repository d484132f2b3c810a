"""Typed errors of the Triton code generator."""

from __future__ import annotations


class CodegenError(RuntimeError):
    """A kernel could not be generated, compiled or launched.

    ``path`` is the generated source file when there is one: open it to see the code Triton saw.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message} (generated source: {path})" if path else message)
