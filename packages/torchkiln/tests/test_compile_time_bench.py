"""``bench --compile-time``: one measurement in this process, the table, the cold/warm summary."""

from __future__ import annotations

from torchkiln.bench import cli, compile_time


def test_one_measurement_reports_phases_and_a_verdict(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    job = {
        "layers": 1,
        "train": True,
        "compiler": "torchkiln",
        "hidden": 16,
        "seq": 4,
        "batch": 2,
        "device": "cpu",
        "dtype": "float32",
    }
    result = compile_time.measure(job)
    assert result["verdicts"] == ["miss"] and not result["eager_fallbacks"]
    assert result["kernels"] > 0 and result["total_s"] > 0
    assert {"capture", "aot", "lowering", "scheduling", "codegen"} <= set(result["phases"])


def test_the_table_and_summary_pair_cold_and_warm_rows() -> None:
    rows = [
        {
            "layers": 4,
            "step": "train",
            "compiler": "torchkiln",
            "cache": "cold",
            "total_s": 10.0,
            "phases": {"aot": 3.0, "capture": 1.0},
            "verdicts": ["miss"],
        },
        {
            "layers": 4,
            "step": "train",
            "compiler": "torchkiln",
            "cache": "warm",
            "total_s": 2.0,
            "phases": {"cache_load": 0.1, "capture": 1.9},
            "verdicts": ["hit"],
        },
        {
            "layers": 4,
            "step": "train",
            "compiler": "torch.compile",
            "cache": "cold",
            "error": "exit code 1: boom",
        },
    ]
    assert compile_time.summary(rows) == [
        "torchkiln train 4 layers: cold 10.00 s, warm 2.00 s (5.0x)"
    ]
    text = compile_time.render(rows, "t")
    assert "hit" in text and "exit code 1: boom" in text and "3.00" in text


def test_the_command_line_takes_the_compile_time_options() -> None:
    args = cli.build_parser().parse_args(
        ["bench", "--compile-time", "--layers", "1,2", "--train", "--hidden", "32"]
    )
    assert args.compile_time and args.layers == "1,2" and args.train and args.hidden == 32
