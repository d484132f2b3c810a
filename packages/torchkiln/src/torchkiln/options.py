"""The options of one ``torchkiln.compile`` call: a frozen dataclass passed down the pipeline."""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
MODES: tuple[str, ...] = (
    "default",
    "reduce-overhead",
    "max-autotune",
    "max-autotune-no-cudagraphs",
)

#: What each torch.compile mode turns on, in CompileOptions fields (Inductor's mode table, read
#: through: reduce-overhead = CUDA graphs; max-autotune = autotuning + CUDA graphs;
#: max-autotune-no-cudagraphs = autotuning only). CUDA graphs apply to CUDA graphs only.
MODE_SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"cudagraphs": True},
    "max-autotune": {"autotune": True, "cudagraphs": True},
    "max-autotune-no-cudagraphs": {"autotune": True},
}

#: Inductor option names (torch.compile's ``options=``) that have a torchkiln meaning, and the
#: CompileOptions field each sets. ``autotune`` is our block-size search for generated kernels
#: and our timing of matmul templates against cuBLAS, which is what Inductor's
#: max_autotune(_pointwise, _gemm) and coordinate-descent tuning do for its own.
INDUCTOR_OPTIONS: dict[str, str] = {
    "max_autotune": "autotune",
    "max_autotune_pointwise": "autotune",
    "max_autotune_gemm": "autotune",
    "coordinate_descent_tuning": "autotune",
    "triton.cudagraphs": "cudagraphs",
    "freezing": "freeze_parameters",
    "fallback_random": "fallback_random",
}

#: Common Inductor options torchkiln accepts but ignores, with the reason the warning gives.
IGNORED_INDUCTOR_OPTIONS: dict[str, str] = {
    "epilogue_fusion": "a product's pointwise consumers go into its matmul template wherever "
    "that is predicted (timed, under max-autotune) to be faster, in every mode "
    "(loop_ir.matmul_templates)",
    "triton.cudagraph_trees": "torchkiln records one CUDA graph per compiled graph, not trees",
    "shape_padding": "unaligned matmuls are padded on CUDA in every mode (loop_ir.pad_matmuls)",
}
CODEGENS: tuple[str, ...] = ("auto", "cpp", "triton")


@dataclass(frozen=True)
class CompileOptions:
    """Everything the pipeline needs to know about how to compile.

    strict: internal errors raise instead of falling back to eager with a warning.
    mode: a torch.compile mode (see ``MODE_SETTINGS``): "default", "reduce-overhead" (CUDA graphs
        for CUDA graphs), "max-autotune" (``autotune`` and CUDA graphs) or
        "max-autotune-no-cudagraphs" (``autotune`` only).
    max_fusions: fusion fuel for the loop-IR scheduler (None = unlimited); bisects a bad fusion.
    recompile_limit: how many guarded entries a captured frame may hold before running eagerly.
    cache_dir: where code generators cache their builds (None = ``$TORCHKILN_CACHE_DIR``, else
        ``$XDG_CACHE_HOME/torchkiln``, else ``~/.cache/torchkiln``); handed to the code
        generator options that know the field.
    autotune: ask the Triton code generator to time block-size choices and matmul templates
        against cuBLAS (set by the max-autotune modes, or Inductor's ``max_autotune`` options).
    cudagraphs: wrap CUDA graphs in ``torch.cuda.CUDAGraph`` (set by reduce-overhead and
        max-autotune, or Inductor's ``triton.cudagraphs`` option).
    cpp_options / triton_options: option objects handed unchanged to ``CppBackend(options=...)``
        / ``TritonBackend(options=...)``, or a dict of their fields (``{"vector_math": False}``:
        the rest are the defaults, ``cache_dir`` and ``autotune`` from these options; kept as a
        sorted tuple of items, a field the class does not declare a ``ValueError`` here, or
        when the pipeline builds it for Triton's where codegen-triton is not installed); None
        lets the code generator pick its defaults. Anything else is a ``TypeError``.
    loop_ir: extra keyword fields for ``LoopIROptions``, as pairs or a dict; a field it does not
        declare, or a value it refuses, is a ``ValueError`` here.
    codegen: "auto" (C++ for CPU tensors, Triton for CUDA tensors), "cpp" or "triton".
    graph_cache: keep each compiled graph (aot-partition's runtime and the compiled forward and
        backward graphs) on disk under ``<cache_dir>/graphs``, so a later process compiling the
        same graph on the same input metadata skips tracing, partitioning, lowering, scheduling
        and code generation (see ``torchkiln.graph_cache`` for what the key covers).
    ddp_buckets: under DistributedDataParallel, split each graph at DDP's gradient buckets so a
        bucket's all-reduce overlaps the backward of the rest (see ``ddp_buckets.py``).
    debug_dir: write every compiled graph's stages to ``<debug_dir>/<function>_<n>/`` (see
        ``debug_dir.py``); None reads ``$TORCHKILN_DEBUG_DIR`` (unset: nothing is written). With
        a debug dir the graph cache is not read, so every stage runs and is written.
    freeze_parameters: on the inference path (no autograd, static shapes), fold batch norm into
        the preceding convolution and compute weight-only subgraphs once, again only when a
        parameter changes (aot-partition's ``freezing.py``); Inductor's ``freezing`` option.
    sdpa_attention: on the inference path (static shapes), route hand-written attention
        (``softmax(q @ k^T * s + mask) @ v``) to ``scaled_dot_product_attention`` (aot-partition's
        ``attention.py``).
    repro: write a standalone repro script (``repro.py``) for each graph that falls back to
        eager: into its debug-dir folder, else under ``<cache root>/repro/`` (the warning names
        it). Repro scripts themselves compile with it off.
    fallback_random: random ops (``torch.rand``, dropout, ``bernoulli``, ...) run as ATen calls on
        torch's generator, so that results and the generator's state after the call equal eager's
        under the same seed (Inductor's ``fallback_random``); off by default, as in torch.compile:
        generated code draws from per-call seeds, with other numbers than eager's.
    capture_scalar_outputs: ``.item()`` / ``.tolist()`` become unbacked symbolic values kept in
        the graph (TorchDynamo's ``capture_scalar_outputs``); False (the default, as in
        TorchDynamo) breaks the graph there.
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
    graph_cache: bool = True
    ddp_buckets: bool = True
    freeze_parameters: bool = True
    sdpa_attention: bool = True
    debug_dir: str | None = None
    repro: bool = True
    capture_scalar_outputs: bool = False
    fallback_random: bool = False

    def __post_init__(self) -> None:
        if self.codegen not in CODEGENS:
            raise ValueError(
                f"torchkiln: unknown codegen {self.codegen!r}; pick one of {', '.join(CODEGENS)}"
            )
        if self.mode not in MODES:
            raise ValueError(
                f"torchkiln: unknown mode {self.mode!r}; pick one of {', '.join(MODES)}"
            )
        if isinstance(self.loop_ir, Mapping):
            object.__setattr__(self, "loop_ir", tuple(sorted(self.loop_ir.items())))
        if self.loop_ir:
            fields = dict(self.loop_ir)
            cls = check_fields("loop_ir", "torchkiln_loop_ir", "LoopIROptions", fields)
            if cls is not None:
                cls(**fields)  # its own checks of values ("depthwise_convolutions" of "yes")
        for name, (module, class_name) in CODEGEN_OPTIONS.items():
            value = getattr(self, name)
            if isinstance(value, Mapping):
                # frozen: set once here, as a hashable, ordered value (like loop_ir)
                value = tuple(sorted(value.items()))
                object.__setattr__(self, name, value)
            if isinstance(value, tuple):
                check_fields(name, module, class_name, dict(value))
            elif not (
                value is None or (dataclasses.is_dataclass(value) and not isinstance(value, type))
            ):
                raise TypeError(
                    f"torchkiln: {name} must be a dict of {class_name} fields or a {class_name}, "
                    f"not {type(value).__name__}"
                )


#: CompileOptions field -> (the code generator's module, its options class)
CODEGEN_OPTIONS = {
    "cpp_options": ("torchkiln_codegen_cpp", "CppOptions"),
    "triton_options": ("torchkiln_codegen_triton", "TritonOptions"),
}


def check_fields(name: str, module: str, class_name: str, fields: Mapping[str, Any]) -> Any:
    """A layer's options class, after a ``ValueError`` where ``fields`` names one it does not
    declare; None where the layer is not installed (nothing checked: the pipeline raises
    ``LayerUnavailable`` if it is needed)."""
    try:
        cls = getattr(importlib.import_module(module), class_name)
    except ImportError:
        return None
    unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise ValueError(
            f"torchkiln: {name} has no field(s) {', '.join(sorted(unknown))}; {class_name}'s "
            f"fields: {', '.join(f.name for f in dataclasses.fields(cls))}"
        )
    return cls


def check_mode(mode: str | None) -> str:
    """``mode`` as a mode name (None is torch.compile's default, "default"); ``ValueError`` for an
    unknown one, listing the known ones."""
    if mode is None:
        return "default"
    if mode not in MODES:
        raise ValueError(f"torchkiln: unknown mode {mode!r}; pick one of {', '.join(MODES)}")
    return mode


def _chosen_mode(keyword: str | None, from_options: str | None) -> str:
    """The keyword's mode, unless it was left at the default and the options name one."""
    keyword, from_options = check_mode(keyword), check_mode(from_options)
    return from_options if keyword == "default" else keyword


def split_options(
    options: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, bool], dict[str, str]]:
    """``options`` as (our own CompileOptions fields, fields set through Inductor names, ignored
    names -> why). A field set by several Inductor names is on if any of them is true."""
    own_fields = {f.name for f in dataclasses.fields(CompileOptions)}
    own: dict[str, Any] = {}
    mapped: dict[str, bool] = {}
    ignored: dict[str, str] = {}
    for key, value in options.items():
        if key in own_fields:
            own[key] = value
        elif key in INDUCTOR_OPTIONS:
            field = INDUCTOR_OPTIONS[key]
            mapped[field] = mapped.get(field, False) or bool(value)
        else:
            ignored[str(key)] = IGNORED_INDUCTOR_OPTIONS.get(key, "no torchkiln meaning")
    return own, mapped, ignored


def _warn_ignored(ignored: dict[str, str], stacklevel: int) -> None:
    reasons = "; ".join(f"{name!r}: {why}" for name, why in ignored.items())
    mapped = ", ".join(INDUCTOR_OPTIONS)
    own = ", ".join(f.name for f in dataclasses.fields(CompileOptions))
    warnings.warn(
        f"torchkiln: ignoring option(s) {reasons}. Inductor names torchkiln maps: {mapped}; "
        f"torchkiln's own: {own}",
        stacklevel=stacklevel + 1,
    )


def resolve_options(
    options: CompileOptions | Mapping[str, Any] | None,
    mode: str | None = None,
    *,
    warn_ignored: bool = True,
    stacklevel: int = 2,
) -> CompileOptions:
    """Merge the user's ``options`` and ``mode`` into CompileOptions, as torch.compile would.

    ``options`` is a CompileOptions or a dict of CompileOptions fields and/or Inductor option
    names (``INDUCTOR_OPTIONS`` are mapped; any other name is ignored with one warning naming
    it, unless ``warn_ignored`` is False: the names were meant for a user's own backend). The
    mode's settings (``MODE_SETTINGS``) come first and explicit options override them; the
    keyword ``mode`` wins over a ``"mode"`` key unless it is left at None/"default".
    Raises ``ValueError`` for an unknown mode.
    """
    if isinstance(options, CompileOptions):
        chosen = _chosen_mode(mode, options.mode)
        # A CompileOptions cannot say which fields were set on purpose: a mode only turns on.
        return dataclasses.replace(options, mode=chosen, **MODE_SETTINGS[chosen])
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(
            f"torchkiln: options must be a dict or CompileOptions, not {type(options).__name__}"
        )
    own, mapped, ignored = split_options(options)
    if ignored and warn_ignored:
        _warn_ignored(ignored, stacklevel)
    chosen = _chosen_mode(mode, own.pop("mode", None))
    values = {**MODE_SETTINGS[chosen], **mapped, **own, "mode": chosen}
    return CompileOptions(**values)
