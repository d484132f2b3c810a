"""Fixtures shared by the end-to-end tests of this folder."""

from __future__ import annotations

import os
import sys

import pytest

# helper modules of this folder (tiny_transformers.py, ...) import by name under
# --import-mode=importlib too
if os.path.dirname(__file__) not in sys.path:
    sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="module")
def private_cache_dir(tmp_path_factory, request):
    """A code cache of the test module's own (``TORCHKILN_CACHE_DIR``), restored afterwards: the
    module's kernels are built fresh, never read from another test's cache."""
    old = os.environ.get("TORCHKILN_CACHE_DIR")
    os.environ["TORCHKILN_CACHE_DIR"] = str(
        tmp_path_factory.mktemp(f"{request.module.__name__}-cache")
    )
    yield
    if old is None:
        os.environ.pop("TORCHKILN_CACHE_DIR", None)
    else:
        os.environ["TORCHKILN_CACHE_DIR"] = old
