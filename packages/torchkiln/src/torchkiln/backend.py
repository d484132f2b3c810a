"""``torchkiln.backend``: our pipeline as a ``torch.compile`` backend.

A user who passes it as ``backend=`` to PyTorch's own compiler gets PyTorch's capture with our
aot -> loop-ir -> codegen pipeline behind it. Each call compiles one graph with default options;
the graph's ``GraphReport`` is attached to the returned callable as ``.torchkiln_report``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchkiln.options import CompileOptions
from torchkiln.pipeline import make_backend
from torchkiln.report import ReportRecorder


def backend(
    gm: torch.fx.GraphModule, example_inputs: list[Any], *, options: CompileOptions | None = None
) -> Callable[..., Any]:
    """Compile ``gm`` for ``example_inputs`` (contract C1/C5); falls back to ``gm.forward`` with a
    warning on internal failures unless ``options.strict``."""
    recorder = ReportRecorder()
    compiled = make_backend(options or CompileOptions(), recorder)(gm, example_inputs)
    try:
        compiled.torchkiln_report = recorder.snapshot()
    except AttributeError:  # a bound method or a slotted object takes no attributes: wrap it
        inner = compiled

        def compiled(*args: Any) -> Any:
            return inner(*args)

        compiled.torchkiln_report = recorder.snapshot()
    return compiled
