"""loop-ir's op table, its ``OpsHandler`` protocol and its own handlers agree (the code generators'
handlers are checked against the same table in the repository's tests/test_ops_contract.py)."""

import inspect
import sys

import pytest
import torch
from torchkiln_loop_ir.handlers import NoOpHandler, WrapperHandler, missing_ops
from torchkiln_loop_ir.inline_cost import _Counter
from torchkiln_loop_ir.kernels import _SimplifyingHandler
from torchkiln_loop_ir.loop_body import _Recording
from torchkiln_loop_ir.printing import PrintingHandler
from torchkiln_loop_ir.reference import TorchOpsHandler

ops_module = sys.modules["torchkiln_loop_ir.ops"]


def test_table_and_protocol_name_the_same_ops_with_the_same_arity():
    declared = {
        n: f
        for n, f in vars(ops_module.OpsHandler).items()
        if inspect.isfunction(f) and not n.startswith("_")
    }
    assert set(declared) == ops_module.ALL_OPS == ops_module.POINTWISE_OPS | ops_module.OTHER_OPS
    for name, fn in declared.items():
        params = list(inspect.signature(fn).parameters.values())[1:]
        assert sum(p.default is p.empty for p in params) == ops_module.OP_SPECS[name].arity, name


@pytest.mark.parametrize(
    "handler",
    [
        TorchOpsHandler,
        PrintingHandler,
        _Recording,
        _Counter,
        _SimplifyingHandler,
        NoOpHandler,
        WrapperHandler,
    ],
    ids=lambda h: h.__name__,
)
def test_loop_ir_handlers_cover_every_op(handler):
    assert missing_ops(handler) == []


@pytest.mark.parametrize("name", sorted(ops_module.POINTWISE_OPS))
def test_reference_results_follow_the_dtype_rule(name):
    """The torch handler (the oracle) gives each pointwise op the table's result dtype."""
    spec = ops_module.OP_SPECS[name]
    dtype = {"any": torch.float32, "float": torch.float64, "integer": torch.int32}[spec.operands]
    h = TorchOpsHandler({}, {}, 1, 1, torch.device("cpu"))
    x = torch.rand(5, dtype=torch.float64).to(dtype) + (1 if dtype != torch.float64 else 0.5)
    args = [x > 1.2, x, x + 1] if name == "where" else [x] * spec.arity
    operands = tuple(a.dtype for a in args)
    assert getattr(h, name)(*args).dtype == ops_module.result_dtype(name, operands)
