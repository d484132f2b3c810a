"""Everything that differs between Triton versions and the CPU interpreter, in one place.

Math functions outside ``tl``'s long-stable core live in libdevice on CUDA, imported as
``from triton.language.extra import libdevice`` (Triton >= 3.0). The interpreter
(TRITON_INTERPRET=1) cannot run libdevice's extern calls, so there every such function is a
small ``@triton.jit`` helper of the kernel prelude (``_prelude.py``) built from tl.exp/log/sqrt.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import triton
from torchkiln_loop_ir.ops import LIBM_UNARY, OP_SPECS

TRITON_VERSION = tuple(int(p) for p in triton.__version__.split(".")[:2] if p.isdigit())

#: The float math ops a kernel calls as a function, by loop-ir op name (loop-ir owns the names
#: and arities: ``LIBM_UNARY``, ``OP_SPECS``): ``math_table`` spells each, and ``PointwiseOps``
#: makes each one it does not define itself a method calling that spelling.
MATH_OPS: tuple[str, ...] = (
    *LIBM_UNARY,
    *"rsqrt erfinv trunc round atan2 copysign pow".split(),
)

#: Those ``tl`` has natively in every supported version (and the interpreter implements):
#: ``tl.<name>``. The rest are libdevice's on CUDA, the prelude's ``_tk_<name>`` when interpreting.
TL_NATIVE = frozenset("exp exp2 log log2 sqrt rsqrt sin cos erf".split())

# where libdevice's (the prelude's) name differs from the op's: round is half to even
_LIBDEVICE_NAME = {"round": "nearbyint"}
_PRELUDE_NAME = {"round": "rint"}


def interpreting() -> bool:
    """True when Triton runs kernels with its CPU interpreter (read at each call: it is env)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def math_table(interpret: bool) -> dict[str, str]:
    """op name -> format string with {0}, {1} operands, for the mode kernels will run in."""
    if TRITON_VERSION < (3, 0):
        raise NotImplementedError(f"triton {triton.__version__}: torchkiln needs triton >= 3.0")
    table = {}
    for name in MATH_OPS:
        args = ", ".join(f"{{{i}}}" for i in range(OP_SPECS[name].arity))
        if name in TL_NATIVE:
            table[name] = f"tl.{name}({args})"
        elif interpret:
            table[name] = f"_tk_{_PRELUDE_NAME.get(name, name)}({args})"
        else:
            table[name] = f"libdevice.{_LIBDEVICE_NAME.get(name, name)}({args})"
    return table


def module_header(interpret: bool) -> str:
    lines = ["import triton", "import triton.language as tl"]
    if not interpret:
        lines.append("from triton.language.extra import libdevice")
    return "\n".join(lines) + "\n"


def async_compile_mode() -> Any:
    """Triton's ``AsyncCompileMode`` (a context manager taking an executor: warmups submit their
    compiles to it), or None in Triton versions without it."""
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:
        return None
    return AsyncCompileMode


def init_driver() -> None:
    """Set up Triton's active driver and target now (lazily built on first use, which several
    compile threads should not race to do)."""
    from triton.runtime import driver

    driver.active.get_current_target()


@functools.lru_cache(maxsize=1)
def _launch_api() -> tuple[Any, Any, Any] | None:
    if not ((3, 4) <= TRITON_VERSION <= (3, 9)):
        return None
    try:
        from triton import knobs
        from triton.runtime import driver
    except ImportError:
        return None
    return knobs.runtime, driver.active.get_current_device, driver.active.get_current_stream


def fast_launcher() -> tuple[Any, Any] | None:
    """(get_current_device, get_current_stream) when a compiled kernel may be relaunched directly.

    Triton 3.4 through 3.9 launch with ``kernel.run(gx, gy, gz, stream, kernel.function,
    kernel.packed_metadata, launch_metadata, enter_hook, exit_hook, *all_params)``; calling it
    ourselves skips JITFunction.run's argument binding and cache-key work on every call. None
    (use ``fn[grid](...)``) on other versions or while a launch hook (a profiler) is installed.
    The getters are ``stream_api``'s. Asked on CUDA only (a CPU-only host has no driver).
    """
    api = stream_api()
    if api is None:
        return None
    runtime, get_device, get_stream = api
    if has_hooks(runtime.launch_enter_hook) or has_hooks(runtime.launch_exit_hook):
        return None
    return get_device, get_stream


@functools.lru_cache(maxsize=1)
def stream_api() -> tuple[Any, Any, Any] | None:
    """(Triton's runtime knobs, the current CUDA device, the current raw stream of a device) for
    direct relaunches (``fast_launcher``, a wrapper's ``stream_for``); None on a Triton whose
    launcher we do not know.

    The two getters are torch's C functions themselves, the ones Triton's driver reaches
    through ``torch.cuda.current_device`` and its lazy-init check: three Python frames less a
    call. CUDA is initialised here, once, so calling them later needs no check (only CUDA
    kernels and wrappers ask)."""
    api = _launch_api()
    if api is None:
        return None
    import torch

    torch.cuda.init()
    c = torch._C
    get_device = getattr(c, "_cuda_getDevice", api[1])
    get_stream = getattr(c, "_cuda_getCurrentRawStream", api[2])
    return api[0], get_device, get_stream


def has_hooks(hook: Any) -> bool:
    """Whether a Triton launch hook is installed: Triton >= 3.5 keeps a HookChain, empty (its
    ``calls``) when there is none; earlier versions None or the hook function.
    ``wrapper.stream_for`` inlines this test (it runs once a compiled call)."""
    return bool(getattr(hook, "calls", hook))


def direct_launch(run: Any) -> tuple[Any, tuple[Any, ...]]:
    """``(launch, extra)`` such that ``launch(gx, gy, gz, stream, function, *extra, metadata,
    launch_metadata, enter_hook, exit_hook, *params)`` launches what ``run(gx, gy, gz, stream,
    function, metadata, launch_metadata, enter_hook, exit_hook, *params)`` launches, ``run``
    being a compiled kernel's ``run``.

    Triton 3.6's ``CudaLauncher.__call__`` allocates global and profile scratch (None when the
    kernel needs none: sizes 0, as ours) and calls its C ``launch`` with the cooperative-grid
    and PDL flags and the two scratch pointers after ``function``; calling that C function
    directly saves a Python frame and two closures per launch. Other versions lay the C call's
    arguments out otherwise (3.9 passes the parameters as one tuple, after annotations): there,
    and for a kernel that needs scratch, ``(run, ())``, the launcher itself."""
    if (
        TRITON_VERSION == (3, 6)
        and type(run).__name__ == "CudaLauncher"
        and getattr(run, "global_scratch_size", None) == 0
        and getattr(run, "profile_scratch_size", None) == 0
        and callable(getattr(run, "launch", None))
    ):
        return run.launch, (run.launch_cooperative_grid, run.launch_pdl, None, None)
    return run, ()
