"""C++/OpenMP kernels for scheduled loop-IR kernels, built with the system compiler and cached on disk."""

from .backend import CppBackend, CppCompiledKernel
from .errors import CodegenError
from .kernel import CppOpsHandler, kernel_source
from .options import CppOptions

__version__ = "0.5.6"

__all__ = [
    "CodegenError",
    "CppBackend",
    "CppCompiledKernel",
    "CppOpsHandler",
    "CppOptions",
    "kernel_source",
]
