"""Result files: the ``meta`` block (versions, device, options, command line, date) and the
JSON file that holds it with the results (``write_result``)."""

from __future__ import annotations

import datetime
import importlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import torch

PACKAGES = (
    "torchkiln",
    "torchkiln-guards",
    "torchkiln-dynamo-capture",
    "torchkiln-aot-partition",
    "torchkiln-loop-ir",
    "torchkiln-codegen-triton",
    "torchkiln-codegen-cpp",
)


def _version(dist: str) -> str | None:
    """The package's own ``__version__`` (works from a source tree on PYTHONPATH too)."""
    try:
        module = importlib.import_module(dist.replace("-", "_"))
    except ImportError:
        return None
    return getattr(module, "__version__", None)


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine()


def collect(device: str, options: dict[str, Any], argv: list[str] | None = None) -> dict[str, Any]:
    try:
        # optional (GPU installs only), and slow to import: only when a result is written
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "command": " ".join(["python -m torchkiln", *(sys.argv[1:] if argv is None else argv)]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "packages": {dist: _version(dist) for dist in PACKAGES},
        "device": device,
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        # Other processes skew CPU timings: the 1/5/15-minute load average says how busy it was.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "options": options,
    }


def write_result(path: str, meta_block: dict[str, Any], **sections: Any) -> None:
    """Write ``{"meta": meta_block, **sections}`` as JSON to ``path`` (its folder made first)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(
        json.dumps({"meta": meta_block, **sections}, indent=2, default=str) + "\n"
    )
