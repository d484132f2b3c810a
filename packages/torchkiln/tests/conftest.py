"""Stand-ins for the lower layers, so the meta-package's own logic is tested on its own.

``standin_layers`` replaces capture (torch.fx.symbolic_trace once per function), aot_compile
(make_fx, then the fw_compiler) and compile_graph/CppBackend (a graph that runs the ATen graph and
claims two kernels) by monkeypatching the layer modules' attributes, which is where the pipeline
looks them up. Tests of the real pipeline do not use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torchkiln_aot_partition
import torchkiln_codegen_cpp
import torchkiln_dynamo_capture
import torchkiln_loop_ir
from torch.fx.experimental.proxy_tensor import make_fx


def fx_capture(
    fn: Any,
    backend: Any,
    *,
    fullgraph: bool = False,
    dynamic: Any = None,
    recompile_limit: int = 8,
    strict: bool = False,  # no eager fallback of its own: every error raises
) -> Any:
    compiled: list[Any] = []

    def run(*args: Any) -> Any:
        if not compiled:
            gm = torch.fx.symbolic_trace(fn)
            compiled.append(backend(gm, list(args)))
        return compiled[0](*args)

    return run


class StandInGraph:
    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.kernels = ["k0", "k1"]
        self.num_kernels = 2
        self.extern_calls = ["aten.mm"]
        self.fallbacks = ["aten.sort"]
        self.wrapper_source = "# stand-in"
        self.source_path = "/tmp/standin_wrapper.py"

    def __call__(self, *args: Any) -> Any:
        return self.gm(*args)


def standin_aot_compile(
    gm: Any,
    example_inputs: Any,
    *,
    fw_compiler: Any,
    bw_compiler: Any = None,
    decompositions: Any = None,
) -> Any:
    aten = make_fx(gm, decomposition_table=decompositions or {})(*example_inputs)
    return fw_compiler(aten, list(example_inputs))


@dataclass(frozen=True)
class StandInLoopIROptions:
    max_fusions: int | None = None


class StandInCppBackend:
    name = "cpp"
    device_type = "cpu"

    def __init__(self, options: Any = None) -> None:
        self.options = options


@pytest.fixture
def standin_layers(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(torchkiln_dynamo_capture, "capture", fx_capture, raising=False)
    monkeypatch.setattr(torchkiln_aot_partition, "aot_compile", standin_aot_compile, raising=False)
    monkeypatch.setattr(
        torchkiln_loop_ir,
        "compile_graph",
        lambda gm, ex, backend, options=None: StandInGraph(gm),
        raising=False,
    )
    monkeypatch.setattr(torchkiln_loop_ir, "decompositions", dict, raising=False)
    monkeypatch.setattr(torchkiln_loop_ir, "LoopIROptions", StandInLoopIROptions, raising=False)
    monkeypatch.setattr(torchkiln_codegen_cpp, "CppBackend", StandInCppBackend, raising=False)
    return monkeypatch


@pytest.fixture
def restore_loggers():
    """Puts every TORCHKILN_LOGS artifact logger's level and handlers back after a test."""
    from torchkiln_guards.logs import ARTIFACTS, logger

    saved = {n: (logger(n).level, list(logger(n).handlers)) for n in ARTIFACTS}
    yield
    for n, (level, handlers) in saved.items():
        logger(n).setLevel(level)
        logger(n).handlers[:] = handlers
