"""The benchmark command: suites, the JSON schema, the table, one model end to end."""

import builtins
import json

import pytest
import torch
import torchkiln
from torchkiln.bench import cli, record, runner, suites, table, zoo
from torchkiln.bench.record import ROW_KEYS, Row

META_KEYS = {
    "command",
    "date",
    "python",
    "torch",
    "triton",
    "packages",
    "device",
    "device_name",
    "options",
}


def test_zoo_is_deterministic_and_in_eval_mode() -> None:
    for name in zoo.MODELS:
        model_a, inputs_a = zoo.build(name, batch=1, seed=3)
        model_b, inputs_b = zoo.build(name, batch=1, seed=3)
        assert not model_a.training
        with torch.no_grad():
            torch.testing.assert_close(model_a(*inputs_a), model_b(*inputs_b), rtol=0, atol=0)
    with pytest.raises(KeyError, match="the zoo has"):
        zoo.build("nope")


def test_a_missing_suite_is_skipped_with_a_message(monkeypatch, capsys, tmp_path) -> None:
    real_import = builtins.__import__

    def no_timm(name, *args, **kwargs):
        if name == "timm" or name.startswith("timm."):
            raise ImportError("No module named 'timm'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_timm)
    with pytest.raises(suites.SuiteUnavailable, match="timm is not installed"):
        suites.load_suite("timm")
    out = tmp_path / "rows.json"
    assert cli.main(["bench", "--suite", "timm", "--no-peer", "--json", str(out)]) == 0
    assert "suite 'timm' skipped" in capsys.readouterr().err
    assert json.loads(out.read_text())["rows"] == []


def test_one_zoo_model_end_to_end_with_json(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a width where nothing folds (timings vary in length)
    out = tmp_path / "result.json"
    code = cli.main(
        [
            "bench",
            "--models",
            "mlp_mixer",
            "--repeat",
            "3",
            "--warmup",
            "1",
            "--no-peer",
            "--batch",
            "1",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "mlp_mixer" in printed and "geomean" in printed
    data = json.loads(out.read_text())
    assert META_KEYS <= set(data["meta"])
    assert "--models mlp_mixer" in data["meta"]["command"]
    assert data["meta"]["packages"]["torchkiln"] == torchkiln.__version__
    (row,) = data["rows"]
    assert set(ROW_KEYS) <= set(row)
    assert row["model"] == "mlp_mixer" and row["suite"] == "zoo" and row["batch"] == 1
    assert row["accuracy"] == "pass", row
    assert row["eager_ms"] > 0 and row["torchkiln_ms"] > 0
    assert row["speedup"] == pytest.approx(row["speedup"])  # a number, not None
    assert row["inductor_ms"] is None and row["peak_mem_mb"] is None  # --no-peer, CPU
    # the speedup is the median of the 3 per-round ratios, with its interval and the rounds
    speedup = row["paired"]["speedup"]
    per_round = sorted(
        e / k for e, k in zip(row["rounds_ms"]["eager"], row["rounds_ms"]["torchkiln"], strict=True)
    )
    assert speedup["rounds"] == 3 and row["speedup"] == pytest.approx(per_round[1])
    assert (speedup["low"], speedup["high"]) == pytest.approx((per_round[0], per_round[2]))
    assert set(row["paired"]) == {"speedup"} and row["verdict"] is None  # no peer, no verdict


def test_one_model_against_a_stand_in_peer_is_compared_round_by_round(monkeypatch) -> None:
    # eager itself stands in for torch.compile: a real second variant, timed in the same rounds
    monkeypatch.setattr(runner, "peer_compile", lambda model, mode="default": model)
    spec = next(s for s in suites.zoo_suite() if s.name == "mlp_mixer")
    (row,) = runner.run_models(
        [spec], record.BenchConfig(repeat=5, warmup=1, batch=1), progress=False
    )
    assert row.accuracy == "pass" and row.inductor_accuracy == "pass", row
    assert {v: len(ms) for v, ms in row.rounds_ms.items()} == {
        "eager": 5,
        "torchkiln": 5,
        "inductor": 5,
    }
    assert row.round_orders[0] == ["eager", "torchkiln", "inductor"]
    assert row.round_orders[3] == ["inductor", "torchkiln", "eager"]
    versus = row.paired["vs_inductor"]
    per_round = sorted(
        c / k for c, k in zip(row.rounds_ms["inductor"], row.rounds_ms["torchkiln"], strict=True)
    )
    assert row.vs_inductor == pytest.approx(per_round[2]) == pytest.approx(versus["median"])
    assert (versus["low"], versus["high"]) == pytest.approx((per_round[0], per_round[4]))
    assert versus["confidence"] == pytest.approx(1 - 2 / 32)  # 5 rounds: [min, max]
    expected = "ahead" if per_round[0] > 1 else "behind" if per_round[4] < 1 else "tie"
    assert row.verdict == expected
    text = table.render([row], width=200)
    assert "tk vs tc" in text and f"{row.vs_inductor:.2f}x" in text and expected in text
    assert f"of 1 models; geomean {row.vs_inductor:.2f}x" in " ".join(text.split())


def test_unknown_model_is_an_error(capsys) -> None:
    assert cli.main(["bench", "--models", "nope", "--no-peer"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_one_failing_model_does_not_stop_the_run() -> None:
    def broken(batch):
        raise RuntimeError("cannot build")

    specs = [suites.ModelSpec("broken", "zoo", broken), suites.zoo_suite()[0]]
    config = record.BenchConfig(peer=False, repeat=2, warmup=1, batch=1)
    rows = runner.run_models(specs, config, progress=False)
    assert rows[0].accuracy == "error: RuntimeError: cannot build"
    assert rows[1].accuracy == "pass" and rows[1].speedup is not None
    text = table.render(rows)
    assert "1 of 2 models failed: error: RuntimeError: cannot build (1)" in text


def test_table_geomean_and_summary() -> None:
    rows = [
        Row(
            "a",
            "zoo",
            "cpu",
            "float32",
            1,
            eager_ms=2.0,
            torchkiln_ms=1.0,
            speedup=2.0,
            inductor_speedup=4.0,
            accuracy="pass",
        ),
        Row(
            "b",
            "zoo",
            "cpu",
            "float32",
            1,
            eager_ms=2.0,
            torchkiln_ms=4.0,
            speedup=0.5,
            inductor_speedup=1.0,
            accuracy="fail",
        ),
    ]
    text = table.render(rows)
    geomean_line = next(line for line in text.splitlines() if "geomean" in line)
    assert "1.00x" in geomean_line and "2.00x" in geomean_line
    assert "1 of 2 models failed: accuracy fail (1)" in text


def test_overhead_command_reports_per_call_costs(tmp_path, capsys) -> None:
    out = tmp_path / "overhead.json"
    assert (
        cli.main(["overhead", "--repeat", "3", "--calls", "20", "--no-peer", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())["result"]
    assert set(result["tiny"]) == {"eager", "torchkiln"}
    assert (
        result["tiny"]["eager"]["us_per_call"] > 0 and result["tiny"]["eager"]["vs_eager_us"] == 0
    )
    # paired by round: 3 rounds give [min, max] of the per-round differences, 75% coverage
    tk = result["tiny"]["torchkiln"]
    assert tk["rounds"] == 3 and tk["confidence"] == 0.75
    assert tk["vs_eager_us_low"] <= tk["vs_eager_us"] <= tk["vs_eager_us_high"]
    assert "us/call" in capsys.readouterr().out


def test_plot_writes_a_png(tmp_path) -> None:
    pytest.importorskip("matplotlib")  # optional dependency of --plot only
    from torchkiln.bench.plot import plot_speedups

    timed = Row("b", "zoo", "cpu", "float32", 1, accuracy="pass")
    record.record_rounds(
        timed, {"eager": [2.0, 3.0, 2.0], "torchkiln": [1.0, 1.0, 1.0], "inductor": [1.0, 2.0, 1.0]}
    )
    rows = [
        Row("a", "zoo", "cpu", "float32", 1, speedup=1.5, inductor_speedup=2.0, accuracy="pass"),
        timed,
    ]
    from torchkiln.bench.plot import _error_bars

    # the bars' whiskers reach the paired interval: eager/torchkiln per round is 2, 3, 2
    assert _error_bars(rows, "speedup") == [[0.0, 0.0], [0.0, 1.0]]
    path = tmp_path / "speedups.png"
    plot_speedups(rows, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_peer_is_loaded_from_outside_packages_or_reported_missing(monkeypatch, tmp_path):
    from torchkiln.bench import _peer

    _peer._peer_module.cache_clear()
    monkeypatch.setattr(_peer, "_candidates", lambda: [tmp_path / "benchmarks" / "peer.py"])
    with pytest.raises(_peer.PeerUnavailable, match="benchmarks/peer.py"):
        _peer.peer_compile(torch.nn.Identity())
    _peer.reset_peer()  # no peer loaded: nothing to reset, no error
    _peer._peer_module.cache_clear()
    monkeypatch.undo()
    assert _peer._peer_module().__file__.endswith("benchmarks/peer.py")
    _peer._peer_module.cache_clear()


def test_training_step_mode_checks_gradients(tmp_path) -> None:
    out = tmp_path / "train.json"
    code = cli.main(
        [
            "bench",
            "--train",
            "--models",
            "gpt",
            "--repeat",
            "2",
            "--warmup",
            "1",
            "--no-peer",
            "--batch",
            "1",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["task"] == "train" and row["accuracy"] == "pass", row
    assert row["graphs"] == 1 and row["op_fallbacks"] == [] and row["kernels"] > 0
    assert row["eager_ms"] > 0 and row["torchkiln_ms"] > 0


def test_a_training_step_with_wrong_gradients_fails_accuracy(monkeypatch) -> None:
    from torchkiln.bench import train

    real = train.Variant.grads

    def skewed(self):
        grads = real(self)
        return [g * 1.01 for g in grads] if self.fn is not self.model else grads

    monkeypatch.setattr(train.Variant, "grads", skewed)
    spec = next(s for s in suites.zoo_suite() if s.name == "mlp_mixer")
    row = runner.run_model(
        spec, record.BenchConfig(peer=False, repeat=1, warmup=1, batch=1, train=True)
    )
    assert row.accuracy == "fail" and any("gradients" in n for n in row.notes)


def test_suites_are_comma_separated_and_checked(capsys) -> None:
    assert cli._suites("zoo,hf") == ["zoo", "hf"]
    assert cli._suites("all") == list(suites.SUITES)
    with pytest.raises(SystemExit):
        cli.main(["bench", "--suite", "zoo,nope"])
    assert "unknown suite(s) nope" in capsys.readouterr().err


def test_full_size_suites_carry_their_batch() -> None:
    pytest.importorskip("transformers")
    full = {s.name: s for s in suites.load_suite("hf", "full")}
    assert full["bert"].batch == 16 and full["llama"].batch == 8
    assert all(s.batch is None for s in suites.load_suite("hf", "small"))


def test_plot_without_matplotlib_stops_before_the_run(monkeypatch, capsys) -> None:
    import importlib.util

    from torchkiln.bench import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    ran = []
    monkeypatch.setattr(runner, "run_models", lambda *a, **k: ran.append(1) or [])
    assert cli.main(["bench", "--plot", "out.png", "--no-peer"]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err and not ran


def test_options_reach_each_compile_and_bad_ones_stop_before_the_run(monkeypatch, capsys):
    """``--options`` (a JSON object) is handed to every model's torchkiln.compile as given (the
    code generators' options as dicts, which reach the backend with their fields); the model
    still matches eager. A name no layer knows is an argument error before any model is
    built."""
    import torchkiln_codegen_cpp

    backends = []
    real_backend = torchkiln_codegen_cpp.CppBackend

    def spy_backend(options=None):
        backends.append(options)
        return real_backend(options=options)

    monkeypatch.setattr(torchkiln_codegen_cpp, "CppBackend", spy_backend)
    seen = []
    real = torchkiln.compile

    def spy(model, mode=None, options=None):
        seen.append(options)
        return real(model, mode=mode, options=options)

    monkeypatch.setattr(runner.torchkiln, "compile", spy)
    wanted = '{"cpp_options": {"simd": false}, "loop_ir": {"max_fusions": 3}}'
    argv = ["bench", "--models", "mlp_mixer", "--repeat", "2", "--warmup", "1", "--no-peer"]
    assert cli.main([*argv, "--batch", "1", "--options", wanted]) == 0
    assert "pass" in capsys.readouterr().out
    (options,) = seen
    assert options["cpp_options"] == {"simd": False}
    assert backends and all(b is not None and b.simd is False for b in backends)
    assert options["loop_ir"] == {"max_fusions": 3} and options["strict"] is False
    for bad, says in (
        ('{"loop_ir": {"no_such_field": 1}}', "no_such_field"),
        ('{"triton_options": {"no_such_field": 1}}', "no_such_field"),
        ('{"no_such_option": 1}', "no_such_option"),
        ("[1]", "JSON object"),
    ):
        with pytest.raises(SystemExit):
            cli.main([*argv, "--options", bad])
        assert says in capsys.readouterr().err
    assert len(seen) == 1  # no model ran for the bad ones


@pytest.mark.parametrize("skew", [1.0, 1.01])
def test_a_training_step_under_cuda_graphs_checks_replayed_gradients(monkeypatch, skew) -> None:
    from torchkiln import cudagraph_steps

    class Skewed(cudagraph_steps.RecomputingRecorder):
        def result(self, value):  # a replay that writes wrong values (when skew is not 1)
            return value * skew if value.is_floating_point() else value

    fake = Skewed()
    monkeypatch.setattr(cudagraph_steps, "RECORDER", fake)
    spec = next(s for s in suites.zoo_suite() if s.name == "mlp_mixer")
    row = runner.run_model(
        spec,
        record.BenchConfig(
            peer=False, repeat=1, warmup=1, batch=1, train=True, mode="reduce-overhead"
        ),
    )
    assert fake.replays > 0
    if skew == 1.0:
        assert row.accuracy == "pass", row.notes
    else:  # the first step ran without replays and passed: the replayed step is what fails
        assert row.accuracy == "fail" and any("after replays" in n for n in row.notes), row.notes
