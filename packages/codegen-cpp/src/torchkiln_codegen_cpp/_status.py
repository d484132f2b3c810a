"""The status word of one kernel call: how a kernel reports an error to the Python caller.

A kernel that can find an error at run time (an out-of-range indirect index; an integer division
by zero is the next) takes one extra, last parameter ``int64_t* tk_status``. Its launcher passes a
fresh zeroed int64 for every call, so calls from several Python threads never see each other's
errors (a process-wide flag did: out-of-range calls returned data while valid calls on other
threads raised). The kernel ORs an error bit into the word from whichever OpenMP thread finds it
(``tk_report``), keeps going with a safe value (a clamped index), and the launcher raises the
exception of the lowest bit set once the kernel returns.

To add an error: a bit here and its exception in ``_ERRORS``; the generated code calls
``tk_report(tk_status, TK_STATUS_<NAME>)`` and sets ``_State.reports_status``.
"""

from __future__ import annotations

STATUS_PARAM = "tk_status"

INDEX_OUT_OF_BOUNDS = 1
ZERO_DIVISION = 2

# bit -> (exception type, message): the exceptions eager PyTorch raises for the same input
_ERRORS: dict[int, tuple[type[Exception], str]] = {
    INDEX_OUT_OF_BOUNDS: (
        IndexError,
        "an indirect index (gather/scatter/embedding) was out of bounds",
    ),
    ZERO_DIVISION: (RuntimeError, "ZeroDivisionError"),
}

# the C side: bit constants, the reporting helper and the bounds check
STATUS_PRELUDE = "\n".join(
    [
        "// ---- per-call status word (see _status.py) ----",
        *(
            f"#define TK_STATUS_{name} {bit}"
            for name, bit in (
                ("INDEX_OUT_OF_BOUNDS", INDEX_OUT_OF_BOUNDS),
                ("ZERO_DIVISION", ZERO_DIVISION),
            )
        ),
        "inline void tk_report(int64_t* status, int64_t bit) {",
        "  __atomic_fetch_or(status, bit, __ATOMIC_RELAXED);",
        "}",
        "// an out-of-range index is clamped to 0 (memory stays safe) and reported",
        "inline int64_t tk_check_index(int64_t i, int64_t size, int64_t* status) {",
        "  if (i < 0 || i >= size) {",
        "    tk_report(status, TK_STATUS_INDEX_OUT_OF_BOUNDS);",
        "    return 0;",
        "  }",
        "  return i;",
        "}",
        "",
    ]
)


def raise_status(kernel: str, status: int) -> None:
    """Raise the exception of the lowest error bit in ``status`` (a nonzero status word)."""
    for bit in sorted(_ERRORS):
        if status & bit:
            kind, message = _ERRORS[bit]
            # eager's division error is the bare word; an index error names the kernel too
            raise kind(message if bit == ZERO_DIVISION else f"kernel {kernel}: {message}")
    raise RuntimeError(f"kernel {kernel} reported an unknown status {status:#x}")
