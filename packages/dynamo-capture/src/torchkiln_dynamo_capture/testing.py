"""A backend for tests, and for looking at what capture makes: ``RecordingBackend`` runs each
graph it is handed as traced and keeps it.

    backend = RecordingBackend()
    f = capture(fn, backend)
    f(x)
    assert backend.calls == 1
    print(backend.code[0])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class RecordingBackend:
    """A capture backend that keeps every graph it is handed (``graphs``, with the
    ``example_inputs`` of each) and runs it as traced (the graph module's ``forward``).
    ``calls`` is how many graphs it was handed, ``code`` their Python source."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []
        self.example_inputs: list[Any] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        self.graphs.append(gm)
        self.example_inputs.append(list(example_inputs))
        return gm.forward

    @property
    def calls(self) -> int:
        return len(self.graphs)

    @property
    def code(self) -> list[str]:
        return [gm.code for gm in self.graphs]
