"""The options of one ``torchkiln.compile`` call: a frozen dataclass passed down the pipeline."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["default", "reduce-overhead", "max-autotune"]
MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune")
CODEGENS: tuple[str, ...] = ("auto", "cpp", "triton")


@dataclass(frozen=True)
class CompileOptions:
    """Everything the pipeline needs to know about how to compile.

    strict: internal errors raise instead of falling back to eager with a warning.
    mode: "default", "reduce-overhead" (CUDA graphs for CUDA graphs), "max-autotune"
        (default plus ``autotune``).
    max_fusions: fusion fuel for the loop-IR scheduler (None = unlimited); bisects a bad fusion.
    recompile_limit: how many guarded entries a captured frame may hold before running eagerly.
    cache_dir: where code generators cache their builds (None = ``$TORCHKILN_CACHE_DIR`` or
        ``~/.cache/torchkiln``); handed to the code generator options that know the field.
    autotune: ask the Triton code generator to time block-size choices (set by max-autotune).
    cudagraphs: wrap CUDA graphs in ``torch.cuda.CUDAGraph`` (set by reduce-overhead).
    cpp_options / triton_options: option objects handed unchanged to ``CppBackend(options=...)``
        / ``TritonBackend(options=...)``; None lets the code generator pick its defaults.
    loop_ir: extra keyword fields for ``LoopIROptions`` (only fields it declares are used).
    codegen: "auto" (C++ for CPU tensors, Triton for CUDA tensors), "cpp" or "triton".
    ddp_buckets: under DistributedDataParallel, split each graph at DDP's gradient buckets so a
        bucket's all-reduce overlaps the backward of the rest (see ``ddp_buckets.py``).
    """

    strict: bool = False
    mode: str = "default"
    max_fusions: int | None = None
    recompile_limit: int = 8
    cache_dir: str | None = None
    autotune: bool = False
    cudagraphs: bool = False
    cpp_options: Any = None
    triton_options: Any = None
    loop_ir: tuple[tuple[str, Any], ...] = ()
    codegen: str = "auto"
    ddp_buckets: bool = True

    def __post_init__(self) -> None:
        if self.codegen not in CODEGENS:
            raise ValueError(
                f"torchkiln: unknown codegen {self.codegen!r}; pick one of {', '.join(CODEGENS)}"
            )
        if self.mode not in MODES:
            raise ValueError(
                f"torchkiln: unknown mode {self.mode!r}; pick one of {', '.join(MODES)}"
            )


def resolve_options(options: CompileOptions | dict[str, Any] | None, mode: str) -> CompileOptions:
    """Merge the user's ``options`` (dict or CompileOptions) and ``mode`` into CompileOptions.

    Raises ``ValueError`` for an unknown mode or option name (listing the known names).
    """
    if mode not in MODES:
        raise ValueError(f"torchkiln: unknown mode {mode!r}; pick one of {', '.join(MODES)}")
    if options is None:
        base = CompileOptions()
    elif isinstance(options, CompileOptions):
        base = options
    elif isinstance(options, dict):
        known = {f.name for f in dataclasses.fields(CompileOptions)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(
                f"torchkiln: unknown option(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        values = dict(options)
        if isinstance(values.get("loop_ir"), dict):
            values["loop_ir"] = tuple(sorted(values["loop_ir"].items()))
        base = CompileOptions(**values)
    else:
        raise TypeError(
            f"torchkiln: options must be a dict or CompileOptions, not {type(options).__name__}"
        )
    changes: dict[str, Any] = {"mode": mode}
    if mode == "max-autotune":
        changes["autotune"] = True
    if mode == "reduce-overhead":
        changes["cudagraphs"] = True
    if base.mode != "default" and mode == "default":
        changes["mode"] = base.mode  # options asked for a mode and the keyword was left alone
        changes.pop("autotune", None)
        changes.pop("cudagraphs", None)
        if base.mode == "max-autotune":
            changes["autotune"] = True
        if base.mode == "reduce-overhead":
            changes["cudagraphs"] = True
    return dataclasses.replace(base, **changes)
