"""pytest plugin for the GPU machine: CUDA is torch's default device in every (xdist) worker, so the
op-level suite's random inputs, and therefore its Triton kernels, are on the GPU.

    TRITON_INTERPRET=0 PYTHONPATH=benchmarks:... pytest -p cuda_default_plugin tests/test_ops_codegen.py -k triton
"""

from __future__ import annotations


def pytest_configure(config) -> None:
    import torch

    torch.set_default_device("cuda")
