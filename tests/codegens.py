"""The code generators an end-to-end test on CPU tensors runs through: the C++ one, and Triton
where its interpreter is on (``TRITON_INTERPRET=1``, as CI and ``nox -s tests`` set; a test
module that sets it itself before triton is imported may list ``"triton"`` plainly)."""

from __future__ import annotations

import pytest

#: read when each test runs, not when this module is imported: a module collected later may set
#: ``TRITON_INTERPRET`` itself
_NO_INTERPRETER = "os.environ.get('TRITON_INTERPRET') in (None, '', '0')"

TRITON = pytest.param(
    "triton",
    marks=pytest.mark.skipif(
        _NO_INTERPRETER,
        reason="CPU tensors need Triton's interpreter (TRITON_INTERPRET=1, as CI sets)",
    ),
)
CODEGENS = ["cpp", TRITON]
