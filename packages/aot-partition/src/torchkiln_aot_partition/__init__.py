"""ATen-level functional graphs, joint forward+backward tracing and min-cut partitioning (AOTAutograd)."""

from .api import aot_compile
from .errors import AOTError, DoubleBackwardUnsupported, MutationAppliedError, NotFunctionalError
from .joint import JointGraph, joint_graph
from .partition import PartitionStats, default_partition, is_recomputable, min_cut_partition
from .saved import RuntimeMetadata, rebuild_runtime, runtime_metadata
from .trace import FunctionalGraph, LiftedGraph, aten_graph, functional_graph, lift_parameters
from .verify import check_functional

__version__ = "0.2.1"

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
    "aot_compile",
    "aten_graph",
    "check_functional",
    "default_partition",
    "functional_graph",
    "is_recomputable",
    "joint_graph",
    "lift_parameters",
    "min_cut_partition",
    "rebuild_runtime",
    "runtime_metadata",
]
