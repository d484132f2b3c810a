"""Fixtures shared by the end-to-end tests of this folder."""

from __future__ import annotations

import os

import pytest


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
