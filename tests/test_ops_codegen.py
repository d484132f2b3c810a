"""Every lowering through both code generators, against eager, on fresh random inputs.

One test per (op spec, code generator): the spec's function over all its cases (odd sizes,
non-contiguous and broadcast inputs) in all its dtypes is traced once to one ATen graph (make_fx +
functionalize + loop-ir's decompositions), compiled with codegen-cpp or codegen-triton (Triton on
the CPU through its interpreter: one compile per spec keeps the suite inside its time budget), and
called on fresh inputs of the same shapes and strides; a failure names the dtype and case. 16-bit floats are
compared with an eager float32 reference at a 16-bit tolerance. The table is test_ops_specs.py.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported by the backend

import pytest
import torch
import torch.utils._python_dispatch
import torchkiln_loop_ir as L
from torch.fx.experimental.proxy_tensor import make_fx

pytestmark = pytest.mark.usefixtures("private_cache_dir")  # tests/conftest.py


def _load_specs():
    name = "torchkiln_op_specs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("test_ops_specs.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


S = _load_specs()
LOW = (torch.float16, torch.bfloat16)
DEFAULT_TOL = {
    torch.float32: (1.3e-5, 1e-5),
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-7, 1e-7),
}


def _backend(name):
    if name == "cpp":
        from torchkiln_codegen_cpp import CppBackend

        return CppBackend()
    from torchkiln_codegen_triton import TritonBackend

    return TritonBackend()


def _flat_fn(spec, lens):
    def fn(*flat):
        outs, k = [], 0
        for n in lens:
            r = spec.fn(*flat[k : k + n])
            k += n
            outs.extend(torch.utils._pytree.tree_leaves(r))
        return tuple(outs)

    return fn


@functools.cache
def _traced(name: str):
    """One graph per spec holding every case of every dtype (one compile per code generator):
    (spec, cases as (dtype, makers), flat fn, graph, example inputs)."""
    spec = next(s for s in S.SPECS if s.name == name)
    cases = [(dt, case) for dt in spec.dtypes for case in spec.cases(dt)]
    makers = [m for _, case in cases for m in case]
    fn = _flat_fn(spec, [len(c) for _, c in cases])
    inputs = [m() for m in makers]
    if spec.fx:
        gm = _fx_graph(fn, inputs)
    else:
        table = L.decompositions() if spec.decompose else {}
        with torch.no_grad():
            gm = make_fx(torch.func.functionalize(fn), decomposition_table=table)(*inputs)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    missing = [str(op) for op in spec.covers if not S.covers(op, targets)]
    assert not missing, (
        f"spec {name} does not reach {missing}; its graph calls {sorted(map(str, targets))}"
    )
    return spec, cases, fn, gm, inputs


def _fx_graph(fn, inputs):
    """``fn``'s ATen calls recorded as written (torch.fx proxies), with ``meta["val"]`` filled
    by fake-tensor propagation as make_fx would."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    graph = torch.fx.Graph()
    tracer = torch.fx.proxy.GraphAppendingTracer(graph)
    args = [torch.fx.Proxy(graph.placeholder(f"arg{i}"), tracer) for i in range(len(inputs))]
    graph.output(tuple(o.node for o in fn(*args)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    FakeTensorProp(gm).propagate(*inputs)
    return gm


class _RoundedTo(torch.utils._python_dispatch.TorchDispatchMode):
    """Rounds every float32 result of a functional op to ``dtype`` (and back to float32)."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.is_mutable or any(r.alias_info is not None for r in func._schema.returns):
            return out
        return torch.utils._pytree.tree_map(
            lambda t: (
                t.to(self.dtype).float()
                if isinstance(t, torch.Tensor) and t.dtype == torch.float32
                else t
            ),
            out,
        )


def _compare(spec, dtype, label, got, expected, reference):
    assert len(got) == len(expected), label
    rtol, atol = spec.tol.get(dtype, DEFAULT_TOL.get(dtype, (0, 0)))
    for i, (g, e, r) in enumerate(zip(got, expected, reference)):
        msg = f"output {i} of {spec.name} ({label})"
        assert g.shape == e.shape and g.dtype == e.dtype, (msg, g.shape, e.shape, g.dtype, e.dtype)
        want = r.to(e.dtype) if dtype in LOW else e
        if e.dtype.is_floating_point and spec.kind != "exact":
            # the coarser of the inputs' tolerance and the output dtype's (a cast to bfloat16)
            orr, oat = DEFAULT_TOL[e.dtype]
            orr, oat = max(orr, rtol), max(oat, atol)
            torch.testing.assert_close(
                g, want, rtol=orr, atol=oat, equal_nan=True, msg=lambda m, msg=msg: f"{msg}: {m}"
            )
        else:
            torch.testing.assert_close(
                g, want, rtol=0, atol=0, equal_nan=True, msg=lambda m, msg=msg: f"{msg}: {m}"
            )


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("name", [s.name for s in S.SPECS])
def test_op(name, codegen):
    spec, cases, _, gm, inputs = _traced(name)
    cg = L.compile_graph(gm, inputs, _backend(codegen), L.LoopIROptions(**spec.options))
    assert sorted(set(cg.fallbacks)) == sorted(set(spec.fallbacks)), cg.fallbacks
    assert set(cg.extern_calls) <= set(spec.extern) | {"aten.randint.low"}, cg.extern_calls
    fresh = [[m() for m in case] for _, case in cases]
    got = cg(*[t for case in fresh for t in case])
    k = 0
    for j, ((dtype, _), args) in enumerate(zip(cases, fresh)):
        expected = list(torch.utils._pytree.tree_leaves(spec.fn(*args)))
        out = got[k : k + len(expected)]
        k += len(expected)
        label = f"{str(dtype).replace('torch.', '')} case {j}"
        if spec.kind == "distribution":
            spec.check(out, args)
            continue
        if dtype not in LOW:
            _compare(spec, dtype, label, out, expected, expected)
            continue
        # 16-bit inputs: the reference is the program in float32 with each op's result rounded to
        # the 16-bit dtype, as eager rounds every tensor it stores and as the compiled code rounds
        # every 16-bit value (eager's own 16-bit accumulations, as in prod, are less accurate);
        # programs written for a float32 reference throughout pass against that one too
        low = [t.float() if t.dtype in LOW else t for t in args]
        with _RoundedTo(dtype):
            per_op = list(torch.utils._pytree.tree_leaves(spec.fn(*low)))
        try:
            _compare(spec, dtype, label, out, expected, per_op)
        except AssertionError:
            _compare(
                spec,
                dtype,
                label,
                out,
                expected,
                list(torch.utils._pytree.tree_leaves(spec.fn(*low))),
            )
    assert k == len(got)


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
def test_boolean_mask_with_another_count_raises(codegen):
    *_, gm, inputs = _traced("boolean_mask_read")
    cg = L.compile_graph(gm, inputs, _backend(codegen))
    x = torch.randn(7, 5)
    other = S.fixed_count_mask((7, 5), 20)()
    with pytest.raises(L.OutputShapeChanged, match="depends on the data"):
        cg(x, other)
