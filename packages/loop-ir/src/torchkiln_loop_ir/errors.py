"""Typed errors of the loop IR."""

from __future__ import annotations


class LoopIRError(RuntimeError):
    """Base class of loop-IR errors."""


class LoweringError(LoopIRError):
    """An ATen node could not be lowered and could not fall back to its ATen kernel."""


class Unlowerable(LoopIRError):
    """Raised by a lowering that cannot handle this call; the node becomes a fallback instead."""


class OutputShapeChanged(LoopIRError):
    """A fallback kernel with a data-dependent output size (``nonzero``, ``x[mask]``) returned
    another size than when the graph was traced; the kernels after it were built for that size."""


class CodegenError(LoopIRError):
    """A code generator could not generate, build, load or launch a kernel: the base of every code
    generator's ``CodegenError``, so callers catch one type whatever the backend.

    ``path`` is the generated source file when there is one (open it to see the code the compiler
    saw); ``tool_output`` is the last lines a compiler printed, when one failed. Both are in the
    message.
    """

    def __init__(self, message: str, path: str | None = None, *, tool_output: str = "") -> None:
        self.path = path
        self.tool_output = tool_output
        full = message
        if path:
            full += f"\n  generated source: {path}"
        if tool_output:
            full += "\n  compiler said:\n" + "\n".join(
                "    " + ln for ln in tool_output.splitlines()
            )
        super().__init__(full)
