"""ATen-level functional graphs, joint forward+backward tracing and min-cut partitioning (AOTAutograd)."""

from .api import aot_compile
from .errors import AOTError, DoubleBackwardUnsupported, MutationAppliedError, NotFunctionalError
from .joint import JointGraph, joint_graph
from .partition import PartitionStats, default_partition, is_recomputable, min_cut_partition
from .saved import RuntimeMetadata, rebuild_runtime, runtime_metadata
from .saved_bytes import (
    SavedBytes,
    partition_saved_bytes,
    saved_activation_bytes,
    saved_tensor_bytes,
)
from .trace import FunctionalGraph, LiftedGraph, aten_graph, functional_graph, lift_parameters
from .verify import check_functional

__version__ = "0.8.12"

__all__ = [
    "AOTError",
    "DoubleBackwardUnsupported",
    "FunctionalGraph",
    "JointGraph",
    "LiftedGraph",
    "MutationAppliedError",
    "NotFunctionalError",
    "PartitionStats",
    "RuntimeMetadata",
    "SavedBytes",
    "aot_compile",
    "aten_graph",
    "check_functional",
    "default_partition",
    "functional_graph",
    "is_recomputable",
    "joint_graph",
    "lift_parameters",
    "min_cut_partition",
    "partition_saved_bytes",
    "rebuild_runtime",
    "runtime_metadata",
    "saved_activation_bytes",
    "saved_tensor_bytes",
]
