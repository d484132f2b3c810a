"""Makes the conformance harness importable from the test files.

The repository runs pytest with ``--import-mode=importlib``, which does not put test folders on
sys.path; the harness module is named uniquely so it cannot shadow anything else.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
