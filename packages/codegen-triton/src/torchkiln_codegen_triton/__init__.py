"""Triton kernels and their Python wrapper for scheduled loop-IR kernels."""

from ._assemble import kernel_source
from .backend import TritonBackend
from .errors import CodegenError
from .kernel import TritonOpsHandler
from .options import TritonOptions
from .wrapper import TritonCompiledKernel

__version__ = "0.9.29"

__all__ = [
    "CodegenError",
    "TritonBackend",
    "TritonCompiledKernel",
    "TritonOpsHandler",
    "TritonOptions",
    "kernel_source",
]
