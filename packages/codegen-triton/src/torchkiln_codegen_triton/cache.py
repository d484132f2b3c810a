"""Content-addressed kernel source files, imported as modules (Triton needs real source files)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from .options import TritonOptions

_modules: dict[str, ModuleType] = {}  # path -> imported module (a cache, not configuration)


def cache_dir(options: TritonOptions) -> Path:
    root = options.cache_dir or os.environ.get("TORCHKILN_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "torchkiln")
    return Path(root) / "triton"


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:40]


def write_source(source: str, options: TritonOptions) -> str:
    """Write ``source`` to ``<cache>/triton/<hash>.py`` atomically (once) and return the path."""
    directory = cache_dir(options)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"k{source_hash(source)}.py"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return str(path)


def load_module(path: str) -> ModuleType:
    """Import the module at ``path`` (once per process)."""
    if path in _modules:
        return _modules[path]
    name = "torchkiln_triton_" + Path(path).stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton's jit looks the module up for its globals
    spec.loader.exec_module(module)
    _modules[path] = module
    return module
