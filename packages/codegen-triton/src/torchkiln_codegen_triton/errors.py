"""Typed errors of the Triton code generator."""

from __future__ import annotations

from torchkiln_loop_ir.errors import CodegenError as _BaseCodegenError


class CodegenError(_BaseCodegenError):
    """A Triton kernel could not be generated, compiled or launched (loop-IR's ``CodegenError``).

    ``path`` is the generated source file when there is one: open it to see the code Triton saw.
    """
