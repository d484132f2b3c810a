"""A training step compared with eager's: the shared check of the end-to-end tests that train
a compiled copy of a module beside the module itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def assert_steps_match(
    compiled: Callable[..., Any],
    ours: torch.nn.Module,
    eager: torch.nn.Module,
    inputs: Callable[[], dict[str, Any] | tuple[Any, ...]],
    *,
    output: Callable[[Any], torch.Tensor] = lambda r: r,
    steps: int = 2,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """``steps`` steps on fresh ``inputs()`` (keyword arguments when a dict): the compiled
    copy's ``output`` against eager's, then each parameter's gradient of the squared mean."""
    for _ in range(steps):
        args = inputs()
        kwargs = args if isinstance(args, dict) else {}
        pos = () if isinstance(args, dict) else args
        out = output(compiled(*pos, **kwargs))
        expected = output(eager(*pos, **kwargs))
        torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
        out.square().mean().backward()
        expected.square().mean().backward()
        for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=atol, rtol=rtol, msg=name)
        ours.zero_grad()
        eager.zero_grad()
