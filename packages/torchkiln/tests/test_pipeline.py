"""torchkiln.compile through the real layers (capture -> aot -> loop-ir -> codegen-cpp), strict mode
so an internal failure fails the test instead of quietly running eagerly."""

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
