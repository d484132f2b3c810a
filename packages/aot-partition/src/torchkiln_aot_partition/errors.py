"""Typed errors raised by the AOT layer."""


class AOTError(RuntimeError):
    """Something in the graph cannot be traced, partitioned or run by the AOT layer.

    The message says which node or input is at fault and what to change.
    """


class NotFunctionalError(AOTError):
    """A graph handed to a compiler breaks contract C2 (see `check_functional`)."""


class DoubleBackwardUnsupported(AOTError):
    """``backward(create_graph=True)`` reached a compiled graph, whose backward is not itself
    differentiable."""


class MutationAppliedError(AOTError):
    """A compiled graph failed after it began writing its input mutations back to the caller's
    tensors. Running it again (eagerly) would apply them twice; the original error is __cause__."""
