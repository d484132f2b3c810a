"""The meta-package's own logic (options, report, fallback, strict, wrappers) on stand-in layers."""

import operator
import warnings
from typing import Any

import pytest
import torch
import torchkiln
import torchkiln_loop_ir
from torchkiln import CompileOptions


def f(x, y):
    return (x * y + 2.0).relu().sum(dim=-1)


def test_report_fields_from_the_pipeline(standin_layers) -> None:
    compiled = torchkiln.compile(f)
    x, y = torch.randn(4, 8), torch.randn(8)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    report = torchkiln.report(compiled)
    assert len(report.graphs) == 1 and not report.eager_fallbacks
    graph = report.graphs[0]
    assert graph.fx_nodes == len(torch.fx.symbolic_trace(f).graph.nodes)
    assert graph.kernels == 2 and report.num_kernels == 2
    assert graph.extern_calls == ["aten.mm"] and graph.fallbacks == ["aten.sort"]
    assert graph.source_path == "/tmp/standin_wrapper.py"
    assert 0.0 < graph.compile_seconds < 60.0
    text = str(report)
    assert "aten.mm" in text and "graphs: 1" in text


def test_a_failing_layer_falls_back_to_eager_with_one_warning(standin_layers) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no lowering for aten.frobnicate\nsecond line")

    standin_layers.setattr(torchkiln_loop_ir, "compile_graph", broken)
    compiled = torchkiln.compile(f)
    x, y = torch.randn(3, 5), torch.randn(5)
    with pytest.warns(
        UserWarning, match=r"torchkiln: .*aten.frobnicate; running this graph eagerly"
    ) as record:
        out = compiled(x, y)
    assert len([w for w in record if "torchkiln" in str(w.message)]) == 1
    torch.testing.assert_close(out, f(x, y))
    report = torchkiln.report(compiled)
    assert not report.graphs and len(report.eager_fallbacks) == 1
    assert "second line" not in report.eager_fallbacks[0].reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # later calls: no new warning
        torch.testing.assert_close(compiled(x, y), f(x, y))


def test_strict_mode_raises(standin_layers) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("codegen exploded")

    standin_layers.setattr(torchkiln_loop_ir, "compile_graph", broken)
    compiled = torchkiln.compile(f, options={"strict": True})
    with pytest.raises(torchkiln.BackendCompilerFailed, match="codegen exploded"):
        compiled(torch.randn(2, 3), torch.randn(3))


def test_strict_mode_raises_an_internal_error_of_capture(monkeypatch) -> None:
    import torchkiln_dynamo_capture.wrapper as capture_wrapper

    def broken(*args, **kwargs):
        raise RuntimeError("capture exploded")

    monkeypatch.setattr(capture_wrapper, "capture_frame", broken)
    x, y = torch.randn(2, 3), torch.randn(3)
    with pytest.raises(RuntimeError, match="capture exploded"):
        torchkiln.compile(f, options={"strict": True})(x, y)
    compiled = torchkiln.compile(f)
    with pytest.warns(UserWarning, match="internal error during capture"):
        torch.testing.assert_close(compiled(x, y), f(x, y))


def test_a_graph_failing_at_run_time_switches_to_eager(standin_layers) -> None:
    class Flaky:
        def __init__(self, gm):
            self.num_kernels, self.kernels, self.extern_calls, self.fallbacks = 1, ["k"], [], []
            self.source_path = ""

        def __call__(self, *args):
            raise RuntimeError("kernel crashed")

    standin_layers.setattr(
        torchkiln_loop_ir, "compile_graph", lambda gm, ex, backend, options=None: Flaky(gm)
    )
    compiled = torchkiln.compile(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    with pytest.warns(UserWarning, match="kernel crashed"):
        torch.testing.assert_close(compiled(x, y), f(x, y))
    report = torchkiln.report(compiled)
    assert not report.graphs and "running the compiled graph" in report.eager_fallbacks[0].reason


def test_missing_capture_runs_the_whole_function_eagerly(monkeypatch) -> None:
    import torchkiln_dynamo_capture

    monkeypatch.delattr(torchkiln_dynamo_capture, "capture", raising=False)
    with pytest.warns(UserWarning, match="running this function eagerly"):
        compiled = torchkiln.compile(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert torchkiln.report(compiled).eager_fallbacks[0].index == -1
    with pytest.raises(torchkiln.LayerUnavailable):
        torchkiln.compile(f, options=CompileOptions(strict=True))


def test_decorator_forms(standin_layers) -> None:
    @torchkiln.compile
    def plain(x):
        return x.sin() + 1

    @torchkiln.compile(mode="max-autotune", options={"max_fusions": 3})
    def with_args(x):
        return x.cos() * 2

    x = torch.randn(6)
    torch.testing.assert_close(plain(x), x.sin() + 1)
    torch.testing.assert_close(with_args(x), x.cos() * 2)
    assert plain.__name__ == "plain" and len(torchkiln.report(with_args).graphs) == 1


def test_module_wrapper_passes_parameters_through(standin_layers) -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)
    ).eval()
    compiled = torchkiln.compile(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(compiled(x), model(x))
    assert isinstance(compiled, torch.nn.Module)
    assert compiled[0].weight is model[0].weight
    assert [id(p) for p in compiled.parameters()] == [id(p) for p in model.parameters()]
    assert compiled.state_dict().keys() == model.state_dict().keys()
    new_state = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    compiled.load_state_dict(new_state)
    torch.testing.assert_close(model[2].bias, new_state["2.bias"])


def test_backend_choices(standin_layers) -> None:
    seen = []

    def my_backend(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    x, y = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(torchkiln.compile(f, backend=my_backend)(x, y), f(x, y))
    assert isinstance(seen[0][0], torch.fx.GraphModule) and seen[0][1][0] is x
    torch.testing.assert_close(torchkiln.compile(f, backend="eager")(x, y), f(x, y))
    with pytest.raises(ValueError, match="backend"):
        torchkiln.compile(f, backend="nope")


def test_options_are_checked() -> None:
    with pytest.warns(UserWarning, match="ignoring option.*'strikt'") as record:
        torchkiln.compile(f, options={"strikt": True})
    assert record[0].filename == __file__  # points at the user's call
    with pytest.raises(ValueError, match="mode"):
        torchkiln.compile(f, mode="fast")
    from torchkiln.options import resolve_options

    assert resolve_options(None, "reduce-overhead").cudagraphs
    assert resolve_options({"mode": "max-autotune"}, "default").autotune
    assert not resolve_options(None, "default").autotune
    assert resolve_options(None, None) == resolve_options(None, "default")
    no_cg = resolve_options(None, "max-autotune-no-cudagraphs")
    assert no_cg.autotune and not no_cg.cudagraphs and no_cg.mode == "max-autotune-no-cudagraphs"
    full = resolve_options(None, "max-autotune")
    assert full.autotune and full.cudagraphs


def test_code_generator_options_as_a_dict(monkeypatch, tmp_path) -> None:
    """``cpp_options`` given as a dict of CppOptions fields reaches the C++ backend (the rest its
    defaults, ``cache_dir`` from the compile options) and the result equals eager's; a field it
    lacks is a ValueError and a value of another kind a TypeError, both at the call, not a
    fallback at the first run."""
    import torchkiln_codegen_cpp
    from torchkiln import pipeline

    built = []
    real = pipeline.code_generator

    def spy(device, options):
        built.append(backend := real(device, options))
        return backend

    monkeypatch.setattr(pipeline, "code_generator", spy)

    def g(x):
        return torch.nn.functional.gelu(x @ x.T) + 1

    options = {"strict": True, "graph_cache": False, "cache_dir": str(tmp_path)}
    compiled = torchkiln.compile(g, options={**options, "cpp_options": {"vector_math": False}})
    x = torch.randn(16, 5)
    torch.testing.assert_close(compiled(x), g(x))
    assert built[0].options == torchkiln_codegen_cpp.CppOptions(
        vector_math=False, cache_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="no field.*vector_maths"):
        torchkiln.compile(g, options={"cpp_options": {"vector_maths": False}})
    with pytest.raises(TypeError, match="cpp_options must be"):
        CompileOptions(cpp_options=3)
    with pytest.raises(ValueError, match="no field.*simdd"):
        CompileOptions(cpp_options=(("simdd", False),))  # the kept form, checked the same
    assert CompileOptions(cpp_options={"simd": False}) == CompileOptions(
        cpp_options={"simd": False}
    )


def test_inductor_option_names_are_mapped_or_named_in_one_warning() -> None:
    from torchkiln.options import resolve_options

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mapped = resolve_options({"max_autotune": True, "triton.cudagraphs": True, "strict": True})
    assert mapped.autotune and mapped.cudagraphs and mapped.strict
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # explicit options override the mode's settings
        off = resolve_options({"triton.cudagraphs": False}, "max-autotune")
    assert off.autotune and not off.cudagraphs
    with pytest.warns(UserWarning) as record:
        kept = resolve_options({"epilogue_fusion": True, "trace.enabled": True, "max_autotune": 1})
    assert len(record) == 1
    message = str(record[0].message)
    assert (
        "'epilogue_fusion': a product's pointwise consumers go into its matmul template" in message
    )
    assert "'trace.enabled': no torchkiln meaning" in message
    assert kept.autotune and not kept.cudagraphs


def test_torch_compile_style_backend_function(standin_layers) -> None:
    gm = torch.fx.symbolic_trace(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    compiled = torchkiln.backend(gm, [x, y])
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert compiled.torchkiln_report.graphs[0].kernels == 2


def test_cudagraphs_skip_on_cpu() -> None:
    from torchkiln.cudagraphs import wrap_cudagraphs

    gm = torch.fx.symbolic_trace(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    wrapped, status = wrap_cudagraphs(gm.forward, gm, [x, y])
    assert status == "skipped: inputs are not all on CUDA"
    torch.testing.assert_close(wrapped(x, y), f(x, y))


def test_cudagraphs_detects_input_mutation() -> None:
    from torchkiln.cudagraphs import _mutates_inputs

    def method_inplace(x):
        return x.add_(1)

    def pure(x):
        return x + 1

    assert _mutates_inputs(torch.fx.symbolic_trace(method_inplace))
    graph = torch.fx.Graph()  # capture emits operator.iadd for `x += 1` on a tensor
    x = graph.placeholder("x")
    graph.output(graph.call_function(operator.iadd, (x, 1)))
    assert _mutates_inputs(torch.fx.GraphModule(torch.nn.Module(), graph))
    assert not _mutates_inputs(torch.fx.symbolic_trace(pure))

    def view_inplace(x):
        x.view(-1)[0].mul_(2)
        return x

    def intermediate_inplace(x, m):
        y = x * 2
        y += 1  # the graph's own tensor: a replay is still right
        return y.masked_fill_(m & (m | m), 0)  # operator.and_/or_ are not in place

    assert _mutates_inputs(torch.fx.symbolic_trace(view_inplace))
    assert not _mutates_inputs(torch.fx.symbolic_trace(intermediate_inplace))


def test_a_user_error_is_raised_and_compiling_goes_on(standin_layers) -> None:
    compiled = torchkiln.compile(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError):
            compiled(torch.randn(2, 3), torch.randn(4))  # shapes do not broadcast: the user's error
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert not torchkiln.report(compiled).eager_fallbacks


def _as_capture_code(source: str, name: str, filename: str = "<capture stand-in>", **names) -> Any:
    """A function whose frames read as capture's: its module is torchkiln_dynamo_capture's."""
    scope = {"__name__": "torchkiln_dynamo_capture._standin", **names}
    exec(compile(source, filename, "exec"), scope)
    return scope[name]


def test_an_internal_capture_error_runs_the_function_eagerly(standin_layers) -> None:
    import torchkiln_dynamo_capture

    def broken_capture(fn, backend, **kwargs):
        # capture's own code (by module name), failing before any of the function ran
        return _as_capture_code(
            "def run(*args):\n    raise AssertionError('translator bug')\n", "run"
        )

    standin_layers.setattr(torchkiln_dynamo_capture, "capture", broken_capture)
    compiled = torchkiln.compile(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    with pytest.warns(UserWarning, match="capture failed: AssertionError: translator bug"):
        torch.testing.assert_close(compiled(x, y), f(x, y))
    torch.testing.assert_close(compiled(x, y), f(x, y))
    assert torchkiln.report(compiled).eager_fallbacks[0].index == -1


def test_capture_running_the_function_eagerly_is_reported(standin_layers) -> None:
    import torchkiln_dynamo_capture

    class EagerCapture:  # what capture does on an unsupported construct: no raise, eager calls
        def __init__(self, fn):
            self.fn, self.unsupported = fn, ValueError("unsupported: calling a generator")

        def __call__(self, *args):
            return self.fn(*args)

    standin_layers.setattr(
        torchkiln_dynamo_capture, "capture", lambda fn, b, **kw: EagerCapture(fn)
    )
    compiled = torchkiln.compile(f)
    x, y = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(compiled(x, y), f(x, y))
    (fallback,) = torchkiln.report(compiled).eager_fallbacks
    assert fallback.index == -1 and "calling a generator" in fallback.reason
