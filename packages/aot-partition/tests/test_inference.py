"""Inference path: functional ATen graphs agree with eager, parameters are lifted, mutations copied back."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F
from _aot_test_modules import batch_norm
from torch import fx
from torchkiln_aot_partition import aot_compile, aten_graph, check_functional


class BatchNorm(torch.nn.BatchNorm1d):
    # nn.BatchNorm1d's input-dim check is data-dependent control flow fx cannot trace.
    def forward(self, x):
        self.num_batches_tracked.add_(1)
        return batch_norm(self, x, self.training)


def _pointwise(x, y):
    return (torch.sigmoid(x) * y + x.exp().clamp(max=3.0),)


def _reduction(x, y):
    return (x.sum(1), (x * y).amax(0), x.mean())


def _matmul(x, y):
    return (torch.matmul(x, y.t()).relu(),)


def _softmax(x, y):
    return (torch.softmax(x + y, dim=-1), F.log_softmax(x, dim=0))


@pytest.mark.parametrize("fn", [_pointwise, _reduction, _matmul, _softmax])
def test_functions_match_eager(fn, compiler, capture):
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    compiled = aot_compile(capture(fn), [x, y], fw_compiler=compiler)
    x2, y2 = torch.randn(6, 8), torch.randn(6, 8)
    for got, want in zip(compiled(x2, y2), fn(x2, y2)):
        torch.testing.assert_close(got, want)
    assert len(compiler.graphs) == 1


def test_layer_norm_params_are_lifted_first(compiler, capture):
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    gm = capture(m)
    x = torch.randn(4, 8)
    with torch.no_grad():
        compiled = aot_compile(gm, [x], fw_compiler=compiler)
        x2 = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x2)[0], m(x2))
    params = list(m.parameters())
    ex = compiler.example_inputs[0]
    assert len(ex) == len(params) + 1
    assert {id(p) for p in params} == {id(e) for e in ex[:-1]} or all(
        any(torch.equal(e, p) for p in params) for e in ex[:-1]
    )
    # In-place weight updates are seen at the next call (parameters are not copied).
    with torch.no_grad():
        m[0].weight.mul_(2)
        x3 = torch.randn(4, 8)
        torch.testing.assert_close(compiled(x3)[0], m(x3))


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_running_stats(training, compiler, capture):
    ref, mod = BatchNorm(5), BatchNorm(5)
    with torch.no_grad():
        for m in (ref, mod):
            m.running_mean.copy_(torch.arange(5.0))
            m.running_var.fill_(2.0)
    ref.train(training)
    mod.train(training)
    x = torch.randn(7, 5)
    with torch.no_grad():
        compiled = aot_compile(capture(mod), [x], fw_compiler=compiler)
        for _ in range(2):
            x2 = torch.randn(7, 5)
            torch.testing.assert_close(compiled(x2)[0], ref(x2))
    torch.testing.assert_close(mod.running_mean, ref.running_mean)
    torch.testing.assert_close(mod.running_var, ref.running_var)
    assert mod.num_batches_tracked.item() == ref.num_batches_tracked.item() == 2


@fx.wrap
def _setitem(x, index, value):
    operator.setitem(x, index, value)


def _mutating(x, b):
    x.add_(1)
    _setitem(b, 0, 0.0)
    return (x * 2 + b.sum(),)


def test_input_mutation_is_copied_back(compiler, capture):
    x, b = torch.randn(3, 4), torch.randn(5)
    compiled = aot_compile(capture(_mutating), [x.clone(), b.clone()], fw_compiler=compiler)
    x1, b1 = torch.randn(3, 4), torch.randn(5)
    x2, b2 = x1.clone(), b1.clone()
    got = compiled(x1, b1)[0]
    want = _mutating(x2, b2)[0]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x1, x2)
    torch.testing.assert_close(b1, b2)
    gm = compiler.graphs[0]
    assert gm.meta["mutated_inputs"] == (0, 1)


def test_aten_graph_alone(capture):
    def fn(x):
        return (torch.nn.functional.gelu(x).sum(-1),)

    x = torch.randn(3, 4)
    gm, _ex = aten_graph(capture(fn), [x])
    check_functional(gm)
    x2 = torch.randn(3, 4)
    torch.testing.assert_close(gm(x2)[0], fn(x2)[0])
    assert all(
        isinstance(n.target, torch._ops.OpOverload)
        for n in gm.graph.nodes
        if n.op == "call_function"
    )


def test_check_functional_rejects_mutation_and_torch_level_graphs(capture):
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchkiln_aot_partition import NotFunctionalError

    def mutate(x):
        x.add_(1)
        return (x * 2,)

    gm = make_fx(mutate)(torch.randn(3))
    with pytest.raises(NotFunctionalError, match="mutates"):
        check_functional(gm)
    with pytest.raises(NotFunctionalError, match="OpOverload|meta"):
        check_functional(capture(_pointwise))


def test_threads_tracing_together_all_succeed(compiler, capture):
    """make_fx from several threads at once (torch.fx's tracer patcher is a process global)."""
    import threading

    fns = [_pointwise, _reduction, _matmul, _softmax] * 2
    # The test's own fx tracer patches nn.Module.__call__ process-wide, so the graphs are
    # captured here, one at a time; only aot_compile (make_fx) runs in the threads.
    gms = [capture(fn) for fn in fns]
    barrier = threading.Barrier(len(fns))
    results: list = [None] * len(fns)

    def work(i: int) -> None:
        x, y = torch.randn(6, 8), torch.randn(6, 8)
        try:
            barrier.wait(timeout=120)
            compiled = aot_compile(gms[i], [x, y], fw_compiler=compiler)
            results[i] = (list(compiled(x, y)), list(fns[i](x, y)))
        except BaseException as e:  # noqa: BLE001 - checked below
            results[i] = e

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert isinstance(r, tuple), repr(r)
        for got, want in zip(*r):
            torch.testing.assert_close(got, want)
    assert len(compiler.graphs) == len(fns)
