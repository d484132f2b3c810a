"""Run every kernel with Triton's CPU interpreter: it must be set before triton is imported."""

import os
import sys
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCHKILN_CACHE_DIR", tempfile.mkdtemp(prefix="torchkiln-triton-tests-"))
sys.path.insert(0, os.path.dirname(__file__))  # the _specs helper module
