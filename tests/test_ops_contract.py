"""The ops contract is code: every handler covers loop-ir's op table, and both code generators
give each pointwise op the result dtype the table's rule says.

The handlers: both code generators' kernel handlers, and loop-ir's own (the reference backend's
torch handler, the printer, the scheduler's recorder, the lowering's op counter, the kernel
builder's simplifying wrapper, and the three base handlers).
"""

from __future__ import annotations

import inspect
import sys

import pytest
import sympy
import torch
from torchkiln_codegen_cpp import CppOpsHandler
from torchkiln_codegen_cpp.kernel import CppValue
from torchkiln_codegen_triton import TritonOpsHandler, TritonOptions
from torchkiln_codegen_triton._assemble import arg_names
from torchkiln_codegen_triton._values import TritonValue
from torchkiln_loop_ir.backend import BufferSpec, KernelNode, KernelSpec, KernelStage
from torchkiln_loop_ir.handlers import DefaultHandler, NoOpHandler, WrapperHandler, missing_ops
from torchkiln_loop_ir.indexing import index_symbol
from torchkiln_loop_ir.inline_cost import _Counter
from torchkiln_loop_ir.kernels import _SimplifyingHandler
from torchkiln_loop_ir.loop_body import _Recording
from torchkiln_loop_ir.printing import PrintingHandler
from torchkiln_loop_ir.reference import TorchOpsHandler

ops_module = sys.modules["torchkiln_loop_ir.ops"]  # the package's ``ops`` name is the proxy
OP_SPECS, ALL_OPS, result_dtype = ops_module.OP_SPECS, ops_module.ALL_OPS, ops_module.result_dtype

HANDLERS = [
    CppOpsHandler,
    TritonOpsHandler,
    TorchOpsHandler,
    PrintingHandler,
    _Recording,
    _Counter,
    _SimplifyingHandler,
    NoOpHandler,
    WrapperHandler,
]

OPERAND_DTYPES = {
    "any": [torch.float32, torch.float64, torch.int32, torch.int64, torch.bool],
    "float": [torch.float32, torch.float64],
    "integer": [torch.int8, torch.int32, torch.int64, torch.bool],
}


def test_protocol_is_the_table():
    """``OpsHandler`` declares exactly the table's ops, each with the table's arity."""
    declared = {
        n: f
        for n, f in vars(ops_module.OpsHandler).items()
        if inspect.isfunction(f) and not n.startswith("_")
    }
    assert set(declared) == ALL_OPS
    for name, fn in declared.items():
        params = list(inspect.signature(fn).parameters.values())[1:]
        required = sum(p.default is p.empty for p in params)
        assert required == OP_SPECS[name].arity, name


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda h: h.__name__)
def test_handler_covers_every_op(handler):
    assert missing_ops(handler) == []


def test_default_handler_names_a_missing_op():
    class OnlyLoads(DefaultHandler):
        def load(self, name, index):
            return name

    h = OnlyLoads()
    assert h.load("a", 0) == "a"
    assert missing_ops(OnlyLoads) == sorted(ALL_OPS - {"load"})
    with pytest.raises(NotImplementedError, match="OnlyLoads has no op 'exp'"):
        h.exp(1.0)
    with pytest.raises(AttributeError):
        h.frobnicate  # noqa: B018 (not an op of the table)


def test_wrapper_forwards_and_noop_runs_masked_bodies():
    inner = PrintingHandler()
    WrapperHandler(inner).add("tmp0", 1.5)
    assert inner.lines == ["tmp0 = ops.add(tmp0, 1.5)"]
    noop = NoOpHandler()
    assert noop.masked(None, lambda: 7, 0.0) == 7
    assert noop.reduction(torch.float32, torch.float32, "welford_reduce", None) == (None,) * 3
    assert isinstance(noop.indirect_indexing(None, 4), sympy.Symbol)


def _spec(reduction: bool = False) -> KernelSpec:
    buffers = {"a": BufferSpec("a", torch.float32, torch.device("cpu"), (8,), (1,))}
    node = KernelNode("a", lambda x, r: None, reduction)
    return KernelSpec(
        "k", (8,), (8,) if reduction else (), (KernelStage("loop", (node,)),), buffers, ("a",), ()
    )


def _cpp_result(name: str, dtypes: list[torch.dtype]) -> torch.dtype:
    h = CppOpsHandler(_spec())
    args = [CppValue(f"v{i}", dt, None) for i, dt in enumerate(dtypes)]
    return getattr(h, name)(*args).dtype


def _triton_result(name: str, dtypes: list[torch.dtype]) -> torch.dtype:
    spec = _spec()
    h = TritonOpsHandler(
        spec,
        arg_names(spec),
        reduction=False,
        looped=False,
        options=TritonOptions(),
        interpret=True,
    )
    h.begin_stage(False)
    args = [TritonValue(f"v{i}", dt, frozenset({"x"})) for i, dt in enumerate(dtypes)]
    return getattr(h, name)(*args).dtype


def _operands(name: str, dtype: torch.dtype) -> list[torch.dtype]:
    spec = OP_SPECS[name]
    if name == "where":
        return [torch.bool, dtype, dtype]
    return [dtype] * spec.arity


POINTWISE_CASES = [
    (name, dt)
    for name in sorted(ops_module.POINTWISE_OPS)
    for dt in OPERAND_DTYPES[OP_SPECS[name].operands]
]


@pytest.mark.parametrize(
    ("name", "dtype"), POINTWISE_CASES, ids=lambda v: str(v).replace("torch.", "")
)
def test_codegen_result_dtypes_follow_the_table(name, dtype):
    operands = _operands(name, dtype)
    want = result_dtype(name, tuple(operands))
    assert (_cpp_result(name, operands), _triton_result(name, operands)) == (want, want)


def test_codegen_cpp_table_kinds_are_the_table_rules():
    """codegen-cpp's template table names its result kind with the op table's rule names."""
    from torchkiln_codegen_cpp._pointwise import POINTWISE

    assert set(POINTWISE) == ops_module.POINTWISE_OPS
    assert {n: kind for n, (_, _, kind) in POINTWISE.items()} == {
        n: OP_SPECS[n].dtype_rule for n in POINTWISE
    }


@pytest.mark.parametrize("name", ["constant", "to_dtype", "index_expr"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool])
def test_codegen_argument_dtype_rule(name, dtype):
    args = {
        "constant": (1, dtype),
        "to_dtype": (None, dtype, torch.float64),
        "index_expr": (index_symbol("x", 0) + 1, dtype),
    }[name]

    want = result_dtype(name, dtype=dtype)
    cpp = CppOpsHandler(_spec())
    cpp_args = (CppValue("v0", torch.float64, None), *args[1:]) if name == "to_dtype" else args
    assert getattr(cpp, name)(*cpp_args).dtype == want
    spec = _spec()
    tri = TritonOpsHandler(
        spec,
        arg_names(spec),
        reduction=False,
        looped=False,
        options=TritonOptions(),
        interpret=True,
    )
    tri.begin_stage(False)
    tri_args = (
        (TritonValue("v0", torch.float64, frozenset({"x"})), *args[1:])
        if name == "to_dtype"
        else args
    )
    assert getattr(tri, name)(*tri_args).dtype == want
