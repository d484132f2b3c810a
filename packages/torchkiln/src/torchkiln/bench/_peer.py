"""Finds the comparison peer (torch.compile) that the bench command measures against.

No file under packages/ calls torch.compile: the peer is ``benchmarks/peer.py`` at the
repository's root, loaded by path. It is looked for at ``$TORCHKILN_PEER`` (a file), then in
``benchmarks/peer.py`` under the working directory or any directory above this file (an editable
install or a source tree). Without it the peer columns stay empty and the row notes say why.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any


class PeerUnavailable(RuntimeError):
    """benchmarks/peer.py could not be found or loaded."""


def _candidates() -> list[Path]:
    found = []
    if os.environ.get("TORCHKILN_PEER"):
        found.append(Path(os.environ["TORCHKILN_PEER"]))
    for root in (Path.cwd(), *Path(__file__).resolve().parents):
        found.append(root / "benchmarks" / "peer.py")
    return found


@functools.cache
def _peer_module() -> ModuleType:
    for path in _candidates():
        if path.is_file():
            spec = importlib.util.spec_from_file_location("torchkiln_bench_peer", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise PeerUnavailable(
        "the torch.compile peer (benchmarks/peer.py) was not found: run from the repository, "
        "or set TORCHKILN_PEER to that file"
    )


def peer_compile(model: Any, mode: str = "default") -> Any:
    """The peer's compiled ``model``; raises PeerUnavailable when the peer file is missing."""
    return _peer_module().peer_compile(model, mode=mode)


def reset_peer() -> None:
    """Reset the peer's caches, when a peer was loaded at all."""
    if _peer_module.cache_info().currsize:
        _peer_module().reset_peer()
