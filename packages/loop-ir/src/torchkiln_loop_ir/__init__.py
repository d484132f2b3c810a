"""Decompositions, lowering to a define-by-run loop IR, the fusion scheduler and buffer planning (TorchInductor's core)."""

__version__ = "0.8.35"

from . import channels_last as _channels_last  # noqa: F401  (defines torchkiln::conv_channels_last, likewise)
from . import linear_group as _linear_group  # noqa: F401  (defines torchkiln::linear_group, likewise)
from . import mkldnn as _mkldnn  # noqa: F401  (defines torchkiln::mkldnn_convolution*, which cached graphs name)
from . import mkldnn_linear as _mkldnn_linear  # noqa: F401  (defines torchkiln::mkldnn_linear*, likewise)
from . import pad_mm as _pad_mm  # noqa: F401  (defines torchkiln::mm_padded_n, likewise)
from .artifact import GraphArtifact, NotCacheable, export_graph, load_graph
from .backend import (
    Backend,
    BackendCapabilities,
    BufferRef,
    BufferSpec,
    CompiledKernel,
    ExternCall,
    Free,
    KernelNode,
    KernelSpec,
    KernelStage,
    ScheduledGraph,
    SymbolSource,
    View,
)
from .compile import CompiledGraph, compile_graph, schedule
from .decompositions import decompositions
from .errors import CodegenError, LoopIRError, LoweringError, OutputShapeChanged, Unlowerable
from .graph import lower
from .indexing import FloorDiv, ModularIndexing, index_symbol
from .ir import GraphIR
from .lowering import LOWERINGS, register_lowering
from .memory import planned_peak_bytes
from .ops import OP_SPECS, OpsHandler, ops, set_ops_handler
from .options import LoopIROptions
from .reference import ReferenceBackend
from .scheduler import FusionDecision, FusionRecord, MemoryDep

__all__ = [
    "LOWERINGS",
    "Backend",
    "BackendCapabilities",
    "BufferRef",
    "BufferSpec",
    "CompiledGraph",
    "CodegenError",
    "CompiledKernel",
    "ExternCall",
    "FloorDiv",
    "Free",
    "FusionDecision",
    "FusionRecord",
    "GraphArtifact",
    "GraphIR",
    "KernelNode",
    "KernelSpec",
    "KernelStage",
    "LoopIRError",
    "LoopIROptions",
    "LoweringError",
    "MemoryDep",
    "ModularIndexing",
    "NotCacheable",
    "OP_SPECS",
    "OpsHandler",
    "OutputShapeChanged",
    "ReferenceBackend",
    "ScheduledGraph",
    "SymbolSource",
    "Unlowerable",
    "View",
    "compile_graph",
    "decompositions",
    "export_graph",
    "index_symbol",
    "load_graph",
    "lower",
    "ops",
    "planned_peak_bytes",
    "register_lowering",
    "schedule",
    "set_ops_handler",
]
