"""TORCHKILN_DEBUG_DIR: a forward+backward graph's folder holds every stage (FX graph, ATen
forward and backward, loop IR, schedule, fusion decisions, wrapper and kernels, guards, timing,
perf hints); every graph of a broken function gets one; the log artifacts print the same stages;
``python -m torchkiln repro <folder>`` writes a script that compiles the graph and checks it."""

import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torchkiln

pytestmark = pytest.mark.usefixtures("restore_loggers")


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))


def _read(folder, name):
    path = folder / name
    assert path.is_file(), f"{name} missing; folder has {sorted(p.name for p in folder.iterdir())}"
    text = path.read_text()
    assert text.strip(), f"{name} is empty"
    return text


def test_a_training_graph_dumps_every_stage(tmp_path):
    model = _model()
    compiled = torchkiln.compile(model, options={"debug_dir": str(tmp_path), "strict": True})
    x = torch.randn(4, 8)
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    grads = torch.autograd.grad(out.sum(), list(model.parameters()))
    want = torch.autograd.grad(model(x).sum(), list(model.parameters()))
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)

    (folder,) = list(tmp_path.iterdir())
    assert folder.name == "Sequential_0"
    assert "def forward" in _read(folder, "fx_graph.py")
    assert "torch.ops.aten" in _read(folder, "aten_forward.py")
    assert "torch.ops.aten" in _read(folder, "aten_backward.py")
    for part in ("forward", "backward"):
        assert "buf" in _read(folder, f"loop_ir_{part}.txt")
        assert "kernel" in _read(folder, f"schedule_{part}.txt").lower()
        fusion = _read(folder, f"fusion_{part}.txt")
        assert all(
            line.startswith(("fused ", "rejected ", "stopped: ")) for line in fusion.splitlines()
        )
        assert all(": " in line for line in fusion.splitlines() if line.startswith("rejected "))
        assert "def " in _read(folder, f"wrapper_{part}.py")
        kernels = list((folder / f"kernels_{part}").iterdir())
        assert kernels and all(k.read_text().strip() for k in kernels)
    assert "rejected " in _read(folder, "fusion_backward.txt")
    assert "return False" in _read(folder, "guards.py")  # the generated guard check
    timing = json.loads(_read(folder, "timing.json"))
    assert {"aot", "lowering", "scheduling", "codegen", "wrapper"} <= set(timing["phases"])
    for part in ("forward", "backward"):  # each part's own phases, the backward's at its compile
        assert {"lowering", "scheduling", "codegen"} <= set(timing["phases_by_part"][part])
        assert all(seconds >= 0 for seconds in timing["phases_by_part"][part].values())
    assert timing["cache"].startswith("off: not read")
    assert "unfused" in _read(folder, "perf_hints.txt")

    (graph,) = torchkiln.report(compiled).graphs
    assert graph.artifacts["debug_dir"] == str(folder)
    assert set(graph.source_paths) == {
        graph.artifacts["forward.wrapper"],
        graph.artifacts["backward.wrapper"],
    }
    assert all(os.path.isfile(p) for k, p in graph.artifacts.items() if k != "debug_dir")
    assert graph.perf_hints and "graph 0 perf hint: " in str(torchkiln.report(compiled))


def _broken(x):
    y = torch.sin(x) * 2.0
    print("graph break")
    return torch.cos(y).sum(dim=0)


def test_every_graph_of_a_broken_function_gets_a_folder_from_the_variable(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("TORCHKILN_DEBUG_DIR", str(tmp_path))
    compiled = torchkiln.compile(_broken)
    x = torch.randn(5, 3)
    torch.testing.assert_close(compiled(x), _broken(x))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_broken_0", "_broken_1"]
    report = torchkiln.report(compiled)
    assert [g.index for g in report.graphs] == [0, 1]
    for g in report.graphs:
        folder = tmp_path / f"_broken_{g.index}"
        assert g.artifacts["debug_dir"] == str(folder)
        assert os.path.isfile(g.artifacts["forward.wrapper"])
        assert "torch.ops.aten" in _read(folder, "aten_forward.py")
        _read(folder, "guards.py")
        assert not (folder / "aten_backward.py").exists()  # inference: no backward graph
    # a second process (run) writing the same dir gets new folders, never overwrites
    again = torchkiln.compile(_broken)
    torch.testing.assert_close(again(x), _broken(x))
    assert {"_broken_0.1", "_broken_1.1"} <= {p.name for p in tmp_path.iterdir()}


def test_the_log_artifacts_print_each_stage(monkeypatch, capsys):
    monkeypatch.setenv("TORCHKILN_LOGS", "aot_graphs,loop_ir,schedule,fusion,perf_hints")

    def f(x, w):
        s = torch.softmax(x @ w, dim=-1)
        return s.sum(dim=0) + s.mean(), x[::2].sum()

    compiled = torchkiln.compile(f, options={"strict": True, "graph_cache": False})
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    for got, want in zip(compiled(x, w), f(x, w)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    err = capsys.readouterr().err
    assert "[torchkiln.aot_graphs] graph 0 ATen forward:" in err
    assert "[torchkiln.loop_ir] graph 0 forward loop IR:" in err
    assert "[torchkiln.schedule] graph 0 forward schedule:" in err
    assert "[torchkiln.fusion] graph 0 forward fusion decisions:" in err
    assert "\nfused " in err and "\nrejected " in err
    assert "[torchkiln.perf_hints] graph 0: forward: " in err


def test_each_log_artifact_prints_the_forward_and_the_backward_of_a_training_graph(
    monkeypatch, capsys
):
    names = ("aot_graphs", "loop_ir", "schedule", "fusion", "output_code", "perf_hints")
    monkeypatch.setenv("TORCHKILN_LOGS", ",".join(names))
    model = _model()
    compiled = torchkiln.compile(model, options={"strict": True, "graph_cache": False})
    x = torch.randn(4, 8)
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    want = torch.autograd.grad(model(x).square().sum(), list(model.parameters()))
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    err = capsys.readouterr().err
    for part in ("forward", "backward"):
        assert f"[torchkiln.aot_graphs] graph 0 ATen {part}:" in err
        assert f"[torchkiln.loop_ir] graph 0 {part} loop IR:" in err
        assert f"[torchkiln.schedule] graph 0 {part} schedule:" in err
        assert f"[torchkiln.fusion] graph 0 {part} fusion decisions:" in err
        assert f"[torchkiln.output_code] graph 0 {part}: wrapper " in err
    # the backward's rejected fusions are printed with their reason
    backward_fusion = err.split("graph 0 backward fusion decisions:", 1)[1].split("\n[torchkiln.")[
        0
    ]
    assert any(
        line.startswith("rejected ") and ": " in line for line in backward_fusion.splitlines()
    )
    # each hint printed once, when its graph compiled (the backward's at the first backward)
    hints = [
        line.split("[torchkiln.perf_hints] ", 1)[-1]
        for line in err.splitlines()
        if line.startswith(("[torchkiln.perf_hints] ", "graph 0: "))
    ]
    (graph,) = torchkiln.report(compiled).graphs
    assert sorted(hints) == sorted(f"graph 0: {h}" for h in graph.perf_hints)
    assert any(h.startswith("backward: ") for h in graph.perf_hints)


def test_the_report_keeps_the_code_of_forward_and_backward_without_a_debug_dir(monkeypatch):
    monkeypatch.delenv("TORCHKILN_DEBUG_DIR", raising=False)
    model = _model()
    compiled = torchkiln.compile(model, options={"strict": True})
    x = torch.randn(4, 8)
    out = compiled(x)
    torch.testing.assert_close(out, model(x))
    out.sum().backward()
    (graph,) = torchkiln.report(compiled).graphs
    assert "debug_dir" not in graph.artifacts
    for part in ("forward", "backward"):
        assert os.path.isfile(graph.artifacts[f"{part}.wrapper"])
        kernels = [p for k, p in graph.artifacts.items() if k.startswith(f"{part}.kernel.")]
        assert kernels and all(os.path.isfile(p) for p in kernels), graph.artifacts
    assert set(graph.source_paths) == {
        graph.artifacts["forward.wrapper"],
        graph.artifacts["backward.wrapper"],
    }
    # the files hold the code that runs: the wrappers call their kernels by name
    for part in ("forward", "backward"):
        source = open(graph.artifacts[f"{part}.wrapper"]).read()  # noqa: SIM115
        assert all(
            key.rsplit(".", 1)[1] in source
            for key in graph.artifacts
            if key.startswith(f"{part}.kernel.")
        )


def test_repro_command_writes_a_script_for_a_dumped_graph(tmp_path):
    def f(x, idx):
        return torch.relu(x[idx]) * 3.0 + x.sum()

    compiled = torchkiln.compile(f, options={"debug_dir": str(tmp_path), "strict": True})
    x, idx = torch.randn(6, 4), torch.tensor([5, 0, 2])
    torch.testing.assert_close(compiled(x, idx), f(x, idx))
    folder = tmp_path / "f_0"
    result = subprocess.run(
        [sys.executable, "-m", "torchkiln", "repro", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    script = folder / "repro.py"
    assert str(script) in result.stdout
    # on its own, the script compiles the graph through torchkiln and matches eager (exit 0)
    run = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "passed: torchkiln matches eager" in run.stdout
    # integer inputs keep their range (indices stay valid)
    assert "'int64', 'cpu', False, 0, 5)" in script.read_text()


def test_a_folder_that_is_not_a_graph_is_refused(tmp_path):
    from torchkiln.bench.cli import main

    with warnings.catch_warnings():
        assert main(["repro", str(tmp_path)]) == 2
