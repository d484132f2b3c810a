"""``torchkiln.backend``: our pipeline as a ``torch.compile`` backend.

A user who passes it as ``backend=`` to PyTorch's own compiler (or ``backend="torchkiln"``,
through the ``torch_dynamo_backends`` entry point) gets PyTorch's capture with our
aot -> loop-ir -> codegen pipeline behind it. torch.compile hands the backend its ``mode=``
(when not the default) and ``options=`` (when given); they mean what they mean for
``torchkiln.compile``. Each call compiles one graph; the graph's ``GraphReport`` is attached to
the returned callable as ``.torchkiln_report``. ``backend.reset`` is ``torchkiln.reset``: torch
calls it from ``torch.compiler.reset()`` for the backends torch.compile has used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torchkiln_guards.logs import check_log_names

from torchkiln.api import reset
from torchkiln.options import CompileOptions, resolve_options
from torchkiln.pipeline import make_backend
from torchkiln.report import ReportRecorder


def backend(
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    *,
    mode: str | None = None,
    options: CompileOptions | Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Compile ``gm`` for ``example_inputs`` (contract C1/C5); falls back to ``gm.forward`` with a
    warning on internal failures unless ``strict``. ``mode``/``options`` as ``torchkiln.compile``
    takes them (torch.compile's mode names, our fields and Inductor's names we map)."""
    check_log_names()
    resolved = resolve_options(options, mode, stacklevel=2)
    recorder = ReportRecorder()
    compiled = make_backend(resolved, recorder, "torch_compile")(gm, example_inputs)
    for _, dump in recorder.take_pending_dumps():
        dump.write(
            "guards.py",
            "# guards belong to torch.compile's own capture here (TORCH_LOGS=guards shows them)",
        )
    # the report travels as an attribute of the returned callable (see the module docstring)
    try:
        compiled.torchkiln_report = recorder.snapshot()  # type: ignore[attr-defined]
    except AttributeError:  # a bound method or a slotted object takes no attributes: wrap it
        inner = compiled

        def compiled(*args: Any) -> Any:
            return inner(*args)

        compiled.torchkiln_report = recorder.snapshot()  # type: ignore[attr-defined]
    return compiled


# torch.compiler.reset() calls ``reset()`` on each backend torch.compile
# has used, when the backend has one: that is torch's only hook, and it reaches us this way.
backend.reset = reset  # type: ignore[attr-defined]
