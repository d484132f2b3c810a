"""torchkiln.compile through the real layers (capture -> aot -> loop-ir -> codegen-cpp), strict mode
so an internal failure fails the test instead of quietly running eagerly."""

import pytest
import torch
import torchkiln

STRICT = {"strict": True}


def pointwise(x, y):
    return torch.relu(x * 2.0 + y) - y / 3.0  # broadcasting (4, 8) with (8,), Python scalars


def reduction(x):
    return x.sum(dim=1) * 0.5, x.amax(dim=0)


def matmul(a, b):
    return (a @ b).tanh()


def test_pointwise_with_broadcasting_and_scalars() -> None:
    compiled = torchkiln.compile(pointwise, options=STRICT)
    for _ in range(2):
        x, y = torch.randn(4, 8), torch.randn(8)
        torch.testing.assert_close(compiled(x, y), pointwise(x, y))
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.eager_fallbacks
    assert report.graphs[0].kernels >= 1 and report.graphs[0].fx_nodes >= 4
    assert report.graphs[0].source_path and report.graphs[0].compile_seconds > 0


def test_reduction() -> None:
    compiled = torchkiln.compile(reduction, options=STRICT)
    x = torch.randn(16, 33)
    for got, want in zip(compiled(x), reduction(x), strict=True):
        torch.testing.assert_close(got, want)
    assert torchkiln.report(compiled).num_kernels >= 1


def test_one_matmul() -> None:
    compiled = torchkiln.compile(matmul, options=STRICT)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    torch.testing.assert_close(compiled(a, b), matmul(a, b))
    graph = torchkiln.report(compiled).graphs[0]
    assert graph.kernels >= 1
    assert any("mm" in op for op in graph.extern_calls + graph.fallbacks)


def test_module_through_the_pipeline_sees_weight_updates() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    ).eval()
    compiled = torchkiln.compile(model, options=STRICT)
    x = torch.randn(5, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        model[0].weight.mul_(0.5)
        torch.testing.assert_close(compiled(x), model(x))


def three_outputs(x, y):
    return pointwise(x, y), x.sum(dim=1) * 0.5, matmul(x, x.t())


def test_backend_on_a_traced_graph_below_capture() -> None:
    """The pipeline under capture (aot -> loop-ir -> codegen-cpp) on a C1-style FX graph."""
    gm = torch.fx.symbolic_trace(three_outputs)
    x, y = torch.randn(4, 8), torch.randn(8)
    compiled = torchkiln.backend(gm, [x, y], options=torchkiln.CompileOptions(strict=True))
    for _ in range(2):
        x, y = torch.randn(4, 8), torch.randn(8)
        for got, want in zip(compiled(x, y), three_outputs(x, y), strict=True):
            torch.testing.assert_close(got, want)
    (graph,) = compiled.torchkiln_report.graphs
    assert graph.fx_nodes == len(gm.graph.nodes) and graph.kernels >= 1
    assert graph.source_path.endswith(".py") and graph.compile_seconds > 0


def test_explain_delegates_to_capture() -> None:
    x, y = torch.randn(4, 8), torch.randn(8)
    assert torchkiln.explain(pointwise)(x, y).graph_count == 1
    compiled = torchkiln.compile(pointwise)
    assert torchkiln.explain(compiled)(x, y).graph_count == 1  # explains the original function


def test_a_backward_that_fails_to_compile_runs_as_its_aten_graph(monkeypatch) -> None:
    """The backward compiles at the first backward, after the forward ran: a failure there
    raised out of ``backward()`` (training fuzz seed 751, before loop-ir 0.8.16 lowered its
    scatter). Now its ATen graph runs op by op: eager's gradients, one warning, one counted
    fallback; strict mode raises."""
    import torchkiln_loop_ir

    real = torchkiln_loop_ir.compile_graph
    calls = []

    def failing_backward(gm, inputs, **kwargs):
        calls.append(gm)
        if len(calls) > 1:
            raise RuntimeError("an internal failure compiling the backward")
        return real(gm, inputs, **kwargs)

    monkeypatch.setattr(torchkiln_loop_ir, "compile_graph", failing_backward)

    def f(x, w):
        return (x @ w).tanh().sum(0)

    x = torch.randn(4, 3)
    w = torch.randn(3, 5, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    compiled = torchkiln.compile(f, options={"graph_cache": False})
    got = compiled(x, w)
    with pytest.warns(UserWarning, match="compiling the backward failed"):
        (g1,) = torch.autograd.grad(got.sum(), [w])
    (g2,) = torch.autograd.grad(f(x, w2).sum(), [w2])
    torch.testing.assert_close(g1, g2)
    (fallback,) = torchkiln.report(compiled).eager_fallbacks
    assert "compiling the backward failed" in fallback.reason

    calls.clear()
    strict = torchkiln.compile(f, options={"graph_cache": False, "strict": True})
    out = strict(x, w)
    with pytest.raises(torchkiln.BackendCompilerFailed, match="compiling the backward"):
        torch.autograd.grad(out.sum(), [w])


def test_a_backward_run_as_aten_gets_its_traced_strides():
    """``at_traced_strides``: the ATen graph of a backward whose compile failed runs with each
    input copied to the strides it was traced with, where they differ (a channels-last saved
    value an ``as_strided`` reads in NCHW order); inputs already so pass through uncopied."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torchkiln.pipeline import at_traced_strides

    def fn(x, y):
        n, c, h, w = x.shape
        return torch.ops.aten.as_strided(x, [n, c, w, h], [c * h * w, h * w, 1, w]) + y.sum()

    x, y = torch.randn(2, 4, 3, 5), torch.randn(3)
    run = at_traced_strides(make_fx(fn, tracing_mode="fake")(x, y))
    cl = x.contiguous(memory_format=torch.channels_last)
    assert not torch.equal(fn(cl, y), fn(x, y))  # what the ATen graph alone would compute
    torch.testing.assert_close(run(cl, y), fn(x, y))
    torch.testing.assert_close(run(x, y), fn(x, y))
