"""``TritonBackend``: the loop-IR ``Backend`` that turns KernelSpecs into Triton kernels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
from torchkiln_loop_ir.backend import (
    BackendCapabilities,
    BufferSpec,
    ExternCall,
    KernelSpec,
    default_parallel_programs,
)
from torchkiln_loop_ir.channels_last import register_depthwise_kernel
from torchkiln_loop_ir.codecache import CodeCache, source_module

from ._assemble import generate
from ._combo import COMBO_CONFIG, combo_source, launch_spec
from ._compat import interpreting
from ._depthwise import conv_depthwise
from ._layout import DEFAULT, choose_layout
from ._naming import PLACEHOLDER, kernel_kind, shared_module
from ._template import choose as choose_template
from ._template import template_config
from .autotune import Config, heuristic_config
from .errors import CodegenError
from .options import TritonOptions
from .precompile import precompile, start_workers
from .wrapper import TritonCompiledKernel, kernel_name, module_source

# loop-ir sends CUDA inference graphs' large depthwise convolutions to this kernel
register_depthwise_kernel("cuda", conv_depthwise)


def parallel_programs() -> int:
    """Programs that keep the current GPU busy: ``PROGRAMS_PER_SM`` per SM (528 on an H200's
    132). 0 under the interpreter or without a GPU: the kernels then run one program at a time
    on the CPU, where splitting a reduction for parallelism only adds a kernel."""
    if interpreting() or not torch.cuda.is_available():
        return 0
    return default_parallel_programs(torch.device("cuda", torch.cuda.current_device()))


def render_kernel(spec: KernelSpec, options: TritonOptions) -> tuple[str, str, Config]:
    """The kernel of ``spec``: its function's name (from its text, ``_naming.py``), its module
    source and its launch configuration (heuristic block sizes)."""
    interpret = interpreting()
    if spec.combo:  # independent pointwise kernels launched as one (_combo.py)
        try:
            body = combo_source(spec, options, interpret=interpret, name=PLACEHOLDER)
            name, source = shared_module(module_source(spec, body, interpret=interpret), "combo")
        except CodegenError:
            raise
        except Exception as e:
            raise CodegenError(f"kernel {spec.name}: {type(e).__name__}: {e}") from e
        return name, source, COMBO_CONFIG
    if spec.template is not None:  # a matrix product and its epilogue (_template.py)
        layout, cfg = DEFAULT, template_config(spec, interpret)
    else:
        layout = choose_layout(spec)
        cfg = heuristic_config(spec, options, layout)
    split = cfg.split > 0
    try:
        gen = generate(
            spec,
            looped=cfg.looped,
            options=options,
            interpret=interpret,
            fn_name=PLACEHOLDER,
            layout=layout,
            split=split,
            note=cfg.reason,
            xblock=cfg.xblock,
            walked=cfg.walked,
        )
        kind = kernel_kind(
            reduction=spec.is_reduction,
            looped=cfg.looped,
            split=split,
            mixed=bool(spec.row_programs),
            template=spec.template is not None,
        )
        name, source = shared_module(module_source(spec, gen.source, interpret=interpret), kind)
    except CodegenError:
        raise
    except Exception as e:
        raise CodegenError(f"kernel {spec.name}: {type(e).__name__}: {e}") from e
    return name, source, replace(cfg, partials=gen.partials)


#: the most kernels one combo kernel launches (``_combo.py``). Triton's compile time of a combo
#: grows faster than its members' (sm_90 on the CPU, casts: 1.1 s for 16 members, 2.8 s for
#: 64, where 64 kernels apart take 0.9 s together), and one combo compiles on one worker: 16
#: keeps each combo short to compile and lets the precompile pool take several at once, for a
#: handful of launches more (ConvNeXt-tiny has about 170 members: 11 launches, not 3)
COMBO_MEMBERS = 16


class TritonBackend:
    """Code generator for CUDA tensors (or CPU tensors under TRITON_INTERPRET=1)."""

    name = "triton"
    device_type = "cuda"
    capabilities = BackendCapabilities(
        reduction_broadcast_reduction=True,
        max_reduction_stages=8,
        mixed_order_rnumel=8192,
        combo_kernels=COMBO_MEMBERS,
        matmul_templates=True,
    )
    #: loop-ir may hand a kernel one memory as an input and an output (a mutated graph input
    #: written in place, loop-ir's in_place.py): each element is read before it is
    #: written; autotuning never reruns such a launch (wrapper.py)
    supports_in_place_inputs = True

    def __init__(self, options: TritonOptions | None = None) -> None:
        self.options = options or TritonOptions()
        # per instance: how many programs fill the GPU (loop-ir splits long reductions with
        # fewer outputs than that, lowering/split_reductions.py)
        self.capabilities = replace(type(self).capabilities, parallel_programs=parallel_programs())

    def choose_matmul_template(
        self,
        requests: Sequence[tuple[KernelSpec, ExternCall, KernelSpec]],
        buffers: Mapping[str, BufferSpec],
    ) -> list[tuple[tuple[tuple[str, int], ...] | None, str]]:
        """loop-ir's ``matmul_templates`` "auto" mode: for each (fused, extern, kernel) (a
        matrix product with ``kernel``'s bodies as its epilogue), the tile the fused kernel
        runs with when that beats ``extern`` then ``kernel`` (timed under ``autotune``,
        predicted otherwise), else None; and why (``_template.choose``)."""
        return choose_template(self, requests, buffers)

    def compile_kernel(self, spec: KernelSpec) -> TritonCompiledKernel:
        name, source, cfg = render_kernel(spec, self.options)
        return self._load(spec, source, cfg, name)

    def _load(
        self, spec: KernelSpec, source: str, cfg: Any, function: str | None = None
    ) -> TritonCompiledKernel:
        """Write ``source`` through the code cache, import it and wrap its kernel (the function
        ``function``; None: ``kernel_name(spec)``, as entries saved before kernels were named by
        their text) for launching. The same text is the same module: kernels that share it share
        their ``JITFunction`` (``_naming.py``)."""
        function = function or kernel_name(spec)
        path = None
        try:
            # registered in sys.modules: Triton's jit looks the kernel's module up for its globals
            module, file = source_module(
                CodeCache.at("triton", self.options.cache_dir),
                source,
                "kernel.py",
                "torchkiln_triton_",
                register=True,
            )
            path = str(file)
            fn = getattr(module, function)
            if cfg.split:  # a split reduction's second kernel (_split.py)
                fn = (fn, getattr(module, function + "_finish"))
        except CodegenError as e:
            if e.path is None and path is not None:
                raise CodegenError(str(e), path) from e
            raise
        except Exception as e:
            raise CodegenError(f"kernel {spec.name}: {type(e).__name__}: {e}", path) from e
        return TritonCompiledKernel(
            launch_spec(spec) if spec.combo else spec,
            source,
            path,
            fn,
            cfg,
            autotune=self.options.autotune
            and not interpreting()
            and not spec.combo
            and spec.template is None,
            function_name=function,
        )

    def compile_kernels(self, kernels: Sequence[KernelSpec]) -> list[TritonCompiledKernel]:
        """One compiled kernel per spec, in order; on CUDA their binaries are compiled in
        parallel before this returns (``precompile``), not one by one at their first launch."""
        options = self.options
        if options.compile_in_processes and options.compile_workers != 0:
            start_workers(len(kernels), options.compile_workers)  # they start while we generate
        compiled = [self.compile_kernel(k) for k in kernels]
        precompile(compiled, options.compile_workers, options.compile_in_processes)
        return compiled

    def export_kernels(self, kernels: Sequence[TritonCompiledKernel]) -> list[dict[str, Any]]:
        """Plain data from which ``load_kernels`` rebuilds ``kernels`` without generating code:
        each kernel's module source and launch configuration."""
        return [
            {"source": k.source, "config": k.config, "function": k.function_name} for k in kernels
        ]

    def load_kernels(
        self, exported: Sequence[dict[str, Any]], specs: Sequence[KernelSpec]
    ) -> list[TritonCompiledKernel]:
        """The kernels ``export_kernels`` saved, for ``specs`` (the same kernel steps, whose
        bodies are not needed: only names, arguments and ranges)."""
        if len(exported) != len(specs):
            raise CodegenError(f"{len(exported)} saved kernels for {len(specs)} kernel steps")
        kernels = [
            self._load(spec, saved["source"], saved["config"], saved.get("function"))
            for saved, spec in zip(exported, specs)
        ]
        precompile(kernels, self.options.compile_workers, self.options.compile_in_processes)
        return kernels
