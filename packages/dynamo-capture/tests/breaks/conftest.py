"""Makes the graph-break corpus importable from test_breaks.py and test_explain_breaks.py.

The repository runs pytest with ``--import-mode=importlib``, which does not put test folders on
sys.path; every module here has a name that starts with ``breaks_`` or ``_breaks_`` so it cannot
shadow anything else.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
