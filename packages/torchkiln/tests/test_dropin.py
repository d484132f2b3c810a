"""torchkiln.compile as a drop-in for torch.compile: the same user programs, called the same way
through ``torch.compile(..., backend="eager")`` (the peer: PyTorch's own capture, no compiler) and
through ``torchkiln.compile(...)`` (our capture and pipeline, strict so a fallback fails the test),
must give eager's results and behave alike: mode=None and every mode name, disable=True, the
decorator forms, options dicts with Inductor names, hooks on the compiled module, reset, and
``torch.compile(backend="torchkiln")`` through the entry point."""

from __future__ import annotations

import inspect
import io
import os
import subprocess
import sys
import textwrap
import tomllib
import warnings
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch
import torchkiln
import torchkiln_dynamo_capture

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def program(x, y):
    return torch.softmax(x @ y + 1.0, dim=-1).sum(dim=0)


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(6, 5), torch.randn(5, 3)


# torch.compile's keyword arguments, as user code passes them (Trainer/Lightning pass mode=None).
CALLS = {
    "no arguments": {},
    "mode=None": {"mode": None},
    "mode=default": {"mode": "default"},
    "reduce-overhead": {"mode": "reduce-overhead"},
    "max-autotune": {"mode": "max-autotune"},
    "max-autotune-no-cudagraphs": {"mode": "max-autotune-no-cudagraphs"},
    "options max_autotune": {"options": {"max_autotune": True}},
    "options triton.cudagraphs": {"options": {"triton.cudagraphs": False}},
    "fullgraph": {"fullgraph": True},
    "dynamic=True": {"dynamic": True},
    "dynamic=False": {"dynamic": False},
}


def _strict(kwargs: dict) -> dict:
    """``kwargs`` for torchkiln with strict on (an internal failure raises instead of falling
    back, so a pass means our pipeline ran). strict travels in options, so for a mode call it
    joins the mode: a combination torchkiln accepts and torch.compile refuses."""
    options = dict(kwargs.get("options") or {})
    options["strict"] = True
    return {**kwargs, "options": options}


@pytest.mark.parametrize("kwargs", CALLS.values(), ids=CALLS.keys())
def test_same_arguments_same_results_on_a_function(kwargs) -> None:
    peer = torch.compile(program, backend="eager", **kwargs)
    ours = torchkiln.compile(program, **_strict(kwargs))
    for _ in range(2):  # the second call runs the cached entry
        x, y = inputs()
        want = program(x, y)
        torch.testing.assert_close(peer(x, y), want)
        torch.testing.assert_close(ours(x, y), want)
    report = torchkiln.report(ours)
    assert len(report.graphs) == 1 and not report.eager_fallbacks


@pytest.mark.parametrize(
    "kwargs", [CALLS["mode=None"], CALLS["max-autotune"], CALLS["options max_autotune"]]
)
def test_same_arguments_same_results_on_a_module_forward_and_backward(kwargs) -> None:
    model = make_model()
    peer = torch.compile(model, backend="eager", **kwargs)
    ours = torchkiln.compile(model, **_strict(kwargs))
    x = torch.randn(5, 8)
    want = model(x)
    (want_grad,) = torch.autograd.grad(want.square().sum(), model[0].weight)
    for compiled in (peer, ours):
        got = compiled(x)
        torch.testing.assert_close(got, want)
        (grad,) = torch.autograd.grad(got.square().sum(), model[0].weight)
        torch.testing.assert_close(grad, want_grad)
    assert isinstance(ours, torch.nn.Module) and isinstance(peer, torch.nn.Module)
    assert ours._orig_mod is model and peer._orig_mod is model


def test_disable_returns_the_object_unchanged() -> None:
    model = make_model()
    for target in (program, model):
        assert torch.compile(target, disable=True) is target
        assert torchkiln.compile(target, disable=True) is target
        assert torch.compile(disable=True)(target) is target
        assert torchkiln.compile(disable=True)(target) is target


def test_decorator_forms_and_the_model_keyword() -> None:
    @torchkiln.compile
    def bare(x, y):
        return program(x, y)

    @torchkiln.compile(mode=None, options={"strict": True})
    def called(x, y):
        return program(x, y)

    @torchkiln.compile(mode="max-autotune", options={"strict": True})
    def with_mode(x, y):
        return program(x, y)

    @torch.compile(mode="max-autotune", backend="eager")
    def peer(x, y):
        return program(x, y)

    keyword = torchkiln.compile(model=program, options={"strict": True})
    x, y = inputs()
    for compiled in (bare, called, with_mode, peer, keyword):
        torch.testing.assert_close(compiled(x, y), program(x, y))
    with pytest.raises(TypeError, match="can't be None"):
        torchkiln.compile()(None)
    with pytest.raises(RuntimeError):
        torch.compile()(None)


SINK = io.StringIO()


def with_break(x):
    y = torch.sin(x) * 2.0
    print("break", file=SINK)  # I/O capture cannot hold: a graph break
    return torch.cos(y).sum()


def test_fullgraph_raises_at_a_break_before_running_anything_as_torch_compile_does() -> None:
    x = torch.randn(4)
    for compiled in (
        torch.compile(with_break, backend="eager", fullgraph=True),
        torchkiln.compile(with_break, fullgraph=True),
    ):
        SINK.seek(0)
        SINK.truncate()
        # torch.compile's error is a RuntimeError (torch._dynamo.exc.Unsupported); so is ours
        with pytest.raises(RuntimeError) as info:
            compiled(x)
        assert SINK.getvalue() == ""  # raised at capture: the print never ran
    assert isinstance(info.value, torchkiln_dynamo_capture.Unsupported)
    assert f"{__file__}:" in str(info.value) and "print" in str(info.value)
    # without fullgraph both split the function at the break and run it, print included
    for compiled in (torch.compile(with_break, backend="eager"), torchkiln.compile(with_break)):
        SINK.seek(0)
        SINK.truncate()
        torch.testing.assert_close(compiled(x), with_break(x))
        assert SINK.getvalue() == "break\nbreak\n"


def shape_program(x):
    return torch.sin(x) * 2.0 + x.sum()


def _recording(shapes: list):
    def backend(gm, example_inputs, **kwargs):
        shapes.append([tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)])
        return gm.forward

    return backend


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_dynamic_compiles_the_same_graphs_as_torch_compile(dynamic) -> None:
    """None: static first, one symbolic graph at the first size change; True: one graph from
    the start; False: one graph per size. Counted at the backend, the same on both sides."""
    torch.compiler.reset()
    peer_shapes: list = []
    ours_shapes: list = []
    peer = torch.compile(shape_program, backend=_recording(peer_shapes), dynamic=dynamic)
    ours = torchkiln.compile(shape_program, backend=_recording(ours_shapes), dynamic=dynamic)
    for n in (4, 6, 9, 6):
        x = torch.randn(n, 3)
        torch.testing.assert_close(peer(x), shape_program(x))
        torch.testing.assert_close(ours(x), shape_program(x))
    assert ours_shapes == peer_shapes
    assert len(ours_shapes) == {None: 2, True: 1, False: 3}[dynamic]
    # and through our pipeline, strict: the same number of compiled graphs, eager's results
    pipeline = torchkiln.compile(shape_program, dynamic=dynamic, options={"strict": True})
    for n in (4, 6, 9, 6):
        x = torch.randn(n, 3)
        torch.testing.assert_close(pipeline(x), shape_program(x))
    assert len(torchkiln.report(pipeline).graphs) == len(peer_shapes)


#: torch.compile's newer keywords (torch 2.13), when this torch has them
NEWER_KEYWORDS = {"name", "recompile_limit", "isolate_recompiles", "shapes_spec"} <= set(
    inspect.signature(torch.compile).parameters
)


def test_torch_compiles_newer_keywords_are_taken() -> None:
    """recompile_limit caps the graphs a frame holds (then it runs eagerly, eager's results);
    name names the debug-dir folders; isolate_recompiles is accepted (ours are always isolated);
    shapes_spec is ignored with a warning naming it."""
    torch.compiler.reset()
    peer_shapes: list = []
    ours_shapes: list = []
    kwargs = {"dynamic": False, "recompile_limit": 1, "isolate_recompiles": True, "name": "block"}
    ours = torchkiln.compile(shape_program, backend=_recording(ours_shapes), **kwargs)
    peer = (
        torch.compile(shape_program, backend=_recording(peer_shapes), **kwargs)
        if NEWER_KEYWORDS
        else None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both warn once at the limit
        for n in (4, 6, 9):
            x = torch.randn(n, 3)
            torch.testing.assert_close(ours(x), shape_program(x))
            if peer is not None:
                torch.testing.assert_close(peer(x), shape_program(x))
    assert ours_shapes == [[(4, 3)]]
    if peer is not None:
        assert peer_shapes == ours_shapes
    # the keyword wins over the options' field
    limited = torchkiln.compile(
        shape_program,
        dynamic=False,
        recompile_limit=2,
        options={"recompile_limit": 5, "strict": True},
    )
    with pytest.warns(torchkiln_dynamo_capture.RecompileLimitExceeded, match="recompile_limit=2"):
        for n in (4, 6, 9):
            x = torch.randn(n, 3)
            torch.testing.assert_close(limited(x), shape_program(x))
    assert len(torchkiln.report(limited).graphs) == 2


def test_name_names_the_debug_dir_folders_and_shapes_spec_is_named_in_a_warning(tmp_path) -> None:
    named = torchkiln.compile(
        shape_program, name="my block", options={"debug_dir": str(tmp_path), "strict": True}
    )
    x = torch.randn(4, 3)
    torch.testing.assert_close(named(x), shape_program(x))
    assert [p.name for p in tmp_path.iterdir()] == ["my_block_0"]
    with pytest.warns(UserWarning, match="ignoring shapes_spec"):
        spec = torchkiln.compile(shape_program, shapes_spec=object(), options={"strict": True})
    torch.testing.assert_close(spec(x), shape_program(x))


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown mode 'fastest'.*max-autotune-no-cudagraphs"):
        torchkiln.compile(program, mode="fastest")


def test_inductor_options_are_mapped_and_the_rest_named_in_one_warning() -> None:
    options = {"max_autotune": True, "epilogue_fusion": True, "trace.enabled": False, 7: None}
    peer = torch.compile(program, backend="eager", options=dict(options))
    with pytest.warns(UserWarning) as record:
        ours = torchkiln.compile(program, options={**options, "strict": True})
    ours_warnings = [w for w in record if "torchkiln" in str(w.message)]
    assert len(ours_warnings) == 1, [str(w.message) for w in record]
    message = str(ours_warnings[0].message)
    assert "'epilogue_fusion'" in message and "'trace.enabled'" in message and "'7'" in message
    assert "'max_autotune'" not in message.split(". ")[0]  # mapped, so not among the ignored
    x, y = inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # calling warns no more
        torch.testing.assert_close(ours(x, y), program(x, y))
    torch.testing.assert_close(peer(x, y), program(x, y))


def _hooked_run(compiled: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Register a pre-hook (scales the input), a forward hook (adds to the output) and a full
    backward hook on ``compiled``; run forward and backward; return the output and the calls."""
    calls: list = []

    def pre(module, args):
        calls.append(("pre", module is compiled, args[0].shape))
        return (args[0] * 2.0,)

    def post(module, args, output):
        calls.append(("forward", module is compiled, output.shape))
        return output + 1.0

    def backward(module, grad_input, grad_output):
        calls.append(("backward", module is compiled, grad_output[0].shape))

    handles = [
        compiled.register_forward_pre_hook(pre),
        compiled.register_forward_hook(post),
        compiled.register_full_backward_hook(backward),
    ]
    out = compiled(x)
    out.sum().backward()
    for handle in handles:
        handle.remove()
    calls.append(("removed", compiled(x).shape))
    return out, calls


def test_hooks_on_the_compiled_module_fire_as_torch_compile_fires_them() -> None:
    model = make_model()
    x = torch.randn(3, 8, requires_grad=True)
    peer_out, peer_calls = _hooked_run(torch.compile(model, backend="eager"), x)
    peer_grad, x.grad = x.grad, None
    ours_out, ours_calls = _hooked_run(torchkiln.compile(model, options={"strict": True}), x)
    ours_grad, x.grad = x.grad, None
    eager_out, eager_calls = _hooked_run(make_model().requires_grad_(False), x)
    assert [c[0] for c in ours_calls] == ["pre", "forward", "backward", "removed"]
    assert ours_calls == eager_calls

    # torch.compile runs forward hooks on its wrapper the same way; its full backward hook on the
    # wrapper does not fire (torch 2.13), where eager's and ours do.
    def forward_only(calls):
        return [c for c in calls if c[0] != "backward"]

    assert forward_only(ours_calls) == forward_only(peer_calls)
    torch.testing.assert_close(ours_out, model(x * 2.0) + 1.0)
    torch.testing.assert_close(ours_out, peer_out)
    torch.testing.assert_close(ours_grad, peer_grad)


class WithKeyword(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x, scale=1.0):
        return self.linear(x) * scale


def _keyword_hooked_run(compiled: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Hooks registered ``with_kwargs=True``: the pre-hook rewrites a keyword argument, the
    forward hook reads it and changes the output; the module is called with that keyword."""
    calls: list = []

    def pre(module, args, kwargs):
        calls.append(("pre", dict(kwargs)))
        return args, {**kwargs, "scale": kwargs["scale"] * 3.0}

    def post(module, args, kwargs, output):
        calls.append(("forward", dict(kwargs)))
        return output + kwargs["scale"]

    handles = [
        compiled.register_forward_pre_hook(pre, with_kwargs=True),
        compiled.register_forward_hook(post, with_kwargs=True),
    ]
    out = compiled(x, scale=2.0)
    for handle in handles:
        handle.remove()
    return out, calls


def test_keyword_hooks_see_and_change_keyword_arguments_as_on_torch_compile() -> None:
    model = WithKeyword()
    x = torch.randn(2, 4)
    eager_out, eager_calls = _keyword_hooked_run(model, x)
    peer_out, peer_calls = _keyword_hooked_run(torch.compile(model, backend="eager"), x)
    ours_out, ours_calls = _keyword_hooked_run(
        torchkiln.compile(model, options={"strict": True}), x
    )
    assert (
        ours_calls
        == peer_calls
        == eager_calls
        == [("pre", {"scale": 2.0}), ("forward", {"scale": 6.0})]
    )
    torch.testing.assert_close(eager_out, model.linear(x) * 6.0 + 6.0)
    torch.testing.assert_close(ours_out, eager_out)
    torch.testing.assert_close(peer_out, eager_out)


class Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = make_model()
        self.scale = 2.0
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.inner(x)) * self.scale


def test_the_compiled_module_proxies_the_original_as_torch_compiles_does() -> None:
    # one proxy for capture and the meta-package (torchkiln_dynamo_capture.ModuleProxy): attribute
    # writes, training mode, indexing and global hooks behave as on torch.compile's wrapper
    from torchkiln_dynamo_capture import ModuleProxy

    x = torch.randn(5, 8)
    seen: dict[str, list] = {}
    for name, compile_ in (
        ("peer", lambda m: torch.compile(m, backend="eager")),
        ("ours", lambda m: torchkiln.compile(m, options={"strict": True})),
    ):
        model = Scaled()
        compiled = compile_(model)
        compiled.eval()
        assert not model.training and not model.drop.training and not compiled.training
        torch.testing.assert_close(compiled(x), model(x))
        compiled.scale = 3.0  # set on the original: the compiled forward sees it
        assert model.scale == 3.0 and compiled.scale == 3.0
        torch.testing.assert_close(compiled(x), model(x))
        model.train()
        assert compiled.training
        compiled.eval()
        calls: list = []
        hook = torch.nn.modules.module.register_module_forward_hook(
            lambda module, args, output, calls=calls: calls.append(type(module).__name__)
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter(
                    "ignore"
                )  # torch.compile warns that the hook fires for its wrapper
                got = compiled(x)
        finally:
            hook.remove()
        torch.testing.assert_close(got, model(x))
        seen[name] = [c == type(compiled).__name__ for c in calls]  # True: the wrapper's own
        if name == "ours":
            assert isinstance(compiled, ModuleProxy)
            assert list(compiled.inner) == list(model.inner) and len(compiled.inner) == 3
    # the global hook fires once for the wrapper itself, last (after its forward), in both
    assert seen["ours"][-1] and seen["peer"][-1]
    assert seen["ours"].count(True) == seen["peer"].count(True) == 1


HOOK_CALLS: list[str] = []


def _halve_and_count(module, args, output):
    HOOK_CALLS.append(type(module).__name__)
    return output * 0.5


def test_hooks_on_the_original_module_fire_too() -> None:
    model = make_model()
    model[1].register_forward_hook(_halve_and_count)
    x = torch.randn(3, 8)
    want = model(x)
    results = {}
    for name, compiled in (
        ("peer", torch.compile(model, backend="eager")),
        ("ours", torchkiln.compile(model, options={"strict": True})),
    ):
        HOOK_CALLS.clear()
        for _ in range(2):
            torch.testing.assert_close(compiled(x), want)
        results[name] = list(HOOK_CALLS)
    assert results["ours"] == results["peer"] == ["GELU", "GELU"]


def test_a_hooks_side_effect_on_a_closure_list_is_kept() -> None:
    # dynamo-capture 0.2.0 dropped the append: the hook was inlined with no source, so what it
    # reached through its closure could not be written back
    model = make_model()
    seen: list[int] = []
    model[1].register_forward_hook(lambda module, args, output: seen.append(1) or output * 0.5)
    compiled = torchkiln.compile(model)
    x = torch.randn(3, 8)
    torch.testing.assert_close(compiled(x), model(x))
    assert seen == [1, 1]


def _counting(calls: list):
    def backend(gm, example_inputs, **kwargs):
        calls.append(len(gm.graph.nodes))
        return gm.forward

    return backend


def test_reset_forgets_compiled_code_as_torch_compiler_reset_does() -> None:
    torch.compiler.reset()  # torch caches per code object: forget other tests' entries for program
    peer_calls: list = []
    ours_calls: list = []
    peer = torch.compile(program, backend=_counting(peer_calls))
    ours = torchkiln.compile(program, backend=_counting(ours_calls))
    pipeline = torchkiln.compile(program, options={"strict": True})
    x, y = inputs()
    for _ in range(2):
        for compiled in (peer, ours, pipeline):
            torch.testing.assert_close(compiled(x, y), program(x, y))
    assert len(peer_calls) == len(ours_calls) == 1
    assert len(torchkiln.report(pipeline).graphs) == 1
    torch.compiler.reset()
    torchkiln.reset()
    assert not torchkiln.report(pipeline).graphs  # the report went with the code
    for compiled in (peer, ours, pipeline):
        torch.testing.assert_close(compiled(x, y), program(x, y))
    assert len(peer_calls) == len(ours_calls) == 2  # both compiled afresh
    assert len(torchkiln.report(pipeline).graphs) == 1


def test_torch_compiler_reset_reaches_torchkiln_through_the_backend() -> None:
    """torch resets the backends torch.compile has used: torchkiln.backend's reset is ours."""
    assert torchkiln.backend.reset is torchkiln.reset
    ours_calls: list = []
    ours = torchkiln.compile(program, backend=_counting(ours_calls))
    x, y = inputs()
    ours(x, y)
    torch.compile(program, backend=torchkiln.backend)(x, y)  # torch now holds our backend
    torch.compiler.reset()
    torch.testing.assert_close(ours(x, y), program(x, y))
    assert len(ours_calls) == 2


def test_torchkiln_backend_takes_torch_compiles_mode_and_options() -> None:
    x, y = inputs()
    for kwargs in (
        {"mode": "max-autotune"},
        {"mode": "reduce-overhead"},
        {"options": {"max_autotune": True, "strict": True}},
        {"options": {"triton.cudagraphs": False, "max_fusions": 2}},
    ):
        compiled = torch.compile(program, backend=torchkiln.backend, **kwargs)
        torch.testing.assert_close(compiled(x, y), program(x, y))
    # an Inductor name without a torchkiln meaning: one warning naming it, never a crash
    torch.compiler.reset()
    compiled = torch.compile(
        program, backend=torchkiln.backend, options={"epilogue_fusion": False, "strict": True}
    )
    with pytest.warns(UserWarning, match="ignoring option.*'epilogue_fusion'"):
        torch.testing.assert_close(compiled(x, y), program(x, y))


def test_a_users_backend_gets_mode_and_options_as_torch_compile_passes_them() -> None:
    seen: dict = {}

    def backend(gm, example_inputs, **kwargs):
        seen.setdefault("calls", []).append(kwargs)
        return gm.forward

    x, y = inputs()
    for kwargs in ({}, {"mode": "default"}, {"mode": "max-autotune"}, {"options": {"k": 1}}):
        torch.compiler.reset()  # torch caches per code object: a fresh compile for each
        seen.clear()
        torch.compile(program, backend=backend, **kwargs)(x, y)
        peer = seen["calls"]
        seen.clear()
        torchkiln.compile(program, backend=backend, **kwargs)(x, y)
        assert seen["calls"] == peer, kwargs


def _entry_point() -> EntryPoint:
    meta = tomllib.loads(PYPROJECT.read_text())["project"]
    (value,) = [
        v
        for name, v in meta["entry-points"]["torch_dynamo_backends"].items()
        if name == "torchkiln"
    ]
    return EntryPoint(name="torchkiln", value=value, group="torch_dynamo_backends")


def test_the_entry_point_names_torchkiln_backend() -> None:
    assert _entry_point().load() is torchkiln.backend


def test_torch_compile_backend_torchkiln_through_installed_metadata(tmp_path) -> None:
    """torch finds ``backend="torchkiln"`` through importlib metadata. The dev venv has torchkiln
    installed from another tree, so this installs just our entry point (a dist-info with the
    pyproject's entry_points) on a fresh interpreter's path, as a wheel install would."""
    ep = _entry_point()
    dist = tmp_path / "torchkiln_entry_point-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torchkiln-entry-point\nVersion: 0.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[{ep.group}]\n{ep.name} = {ep.value}\n")
    script = textwrap.dedent(
        """
        import torch, torchkiln

        def program(x, y):
            return torch.softmax(x @ y + 1.0, dim=-1).sum(dim=0)

        compiled = torch.compile(program, backend="torchkiln", options={"strict": True})
        for _ in range(2):
            x, y = torch.randn(6, 5), torch.randn(5, 3)
            torch.testing.assert_close(compiled(x, y), program(x, y))
        compiled = torch.compile(program, backend="torchkiln", mode=None)
        torch.testing.assert_close(compiled(x, y), program(x, y))
        print("ok")
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


#: made importable first on a subprocess's path: from interpreter start, importing triton or
#: torchkiln_codegen_triton (or anything under them) fails as when they are not installed
BLOCKER = textwrap.dedent(
    """
    import sys

    BLOCKED = ("triton", "torchkiln_codegen_triton")


    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, NotInstalled())
    """
)


def test_cpu_use_needs_neither_triton_nor_codegen_triton(tmp_path) -> None:
    """A CPU-only install has no triton (torchkiln's "triton" extra is off; its dependencies
    name neither, tests/test_layering.py checks): with both unimportable from interpreter start
    (a sitecustomize meta-path blocker), compiling, training and the graph cache work on CPU
    tensors and match eager."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    script = textwrap.dedent(
        """
        import sys, warnings
        import torch, torchkiln

        for name in ("triton", "torchkiln_codegen_triton"):
            try:
                __import__(name)
                raise SystemExit(f"{name} imported: the blocker is not installed")
            except ImportError:
                pass

        def run():
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
            compiled = torchkiln.compile(model, options={"strict": True})
            x = torch.randn(4, 8)
            out = compiled(x)
            torch.testing.assert_close(out, model(x))
            grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
            want = torch.autograd.grad(model(x).square().sum(), list(model.parameters()))
            for g, w in zip(grads, want):
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
            (graph,) = torchkiln.report(compiled).graphs
            return graph.cache

        # the graph cache keys without codegen-triton: stored, then found
        assert run() == "miss", "first compile"
        torchkiln.reset()
        assert run() == "hit", "second compile"
        # asking for Triton without the extra: one warning saying how to get it, eager result
        fn = torchkiln.compile(lambda t: t.sin() + 1, options={"codegen": "triton"})
        x = torch.randn(4, 8)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.testing.assert_close(fn(x), x.sin() + 1)
        assert any("torchkiln[triton]" in str(w.message) for w in caught), caught
        assert not [m for m in sys.modules if m.split(".")[0] in ("triton", "torchkiln_codegen_triton")]
        print("ok")
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "TORCHKILN_CACHE_DIR": str(tmp_path / "cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]


def test_torchkiln_disable_and_mark_dynamic_reexported():
    calls = []

    @torchkiln.disable
    def helper(x):
        calls.append(1)
        return x * 2

    def f(x):
        return helper(x.sin()).cos()

    compiled = torchkiln.compile(f, options={"strict": True})
    for n in (4, 6, 9):
        x = torch.randn(n, 3)
        torchkiln.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), f(x))
    assert len(calls) == 6  # once per compiled call and once per eager call: never traced
    # the marked input: one graph before the helper for every size; the continuation after it
    # gets an unmarked tensor: static at first, symbolic from its first recompile (2 graphs)
    assert len(torchkiln.report(compiled).graphs) == 3
