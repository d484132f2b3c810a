"""The training table's own columns: kernels and ATen fallbacks split into forward and backward,
the bytes the forward saves for the backward (torchkiln's min-cut figure, eager's measured), and
torchkiln's peak memory flagged where it is above eager's."""

from __future__ import annotations

import json

import torch
import torchkiln
from torchkiln.bench import cli, record, runner, table
from torchkiln.bench.record import Row
from torchkiln.bench.suites import ModelSpec
from torchkiln_aot_partition import saved_tensor_bytes


class _TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def _tiny_spec() -> ModelSpec:
    def build(batch):
        torch.manual_seed(0)
        return _TinyMLP(), (torch.randn(batch, 8),)

    return ModelSpec("tiny_mlp", "test", build)


def test_saved_bytes_of_a_tiny_mlp_are_the_hand_count() -> None:
    """fc2(tanh(fc1(x))), x needing no gradient: the backward needs tanh's output y (its own
    derivative 1 - y^2, and fc2's weight gradient y^T g), batch x 16 floats; x and the weights
    are the caller's. Eager saves the same storage (tanh's result, fc2's input)."""
    batch = 3
    row = runner.run_model(
        _tiny_spec(), record.BenchConfig(peer=False, repeat=2, warmup=1, batch=batch, train=True)
    )
    assert row.accuracy == "pass", row
    assert row.saved_bytes == batch * 16 * 4
    assert row.eager_saved_bytes == batch * 16 * 4
    assert row.kernels_fw > 0 and row.kernels_bw > 0
    assert row.kernels_fw + row.kernels_bw == row.kernels


def test_report_figure_equals_the_saved_tensors_of_a_compiled_call() -> None:
    """The report's saved-activation bytes (the partition's saved list, summed by aot-partition)
    against an independent count: autograd's saved-tensor hooks over a call of the compiled
    model on fresh inputs, less the parameters and inputs; gradients equal eager's."""
    model = _TinyMLP()
    ref = _TinyMLP()
    ref.load_state_dict(model.state_dict())
    compiled = torchkiln.compile(model)
    x = torch.randn(5, 8)
    compiled(x).pow(2).mean().backward()  # compiles forward and backward
    (graph,) = torchkiln.report(compiled).graphs
    assert graph.saved_activation_bytes == 5 * 16 * 4
    assert set(graph.part_kernels) == {"forward", "backward"}
    assert sum(graph.part_kernels.values()) == graph.kernels
    x1 = torch.randn(5, 8)  # fresh input
    held = [*model.parameters(), x1]
    out, saved = saved_tensor_bytes(compiled, x1, held=held)
    assert saved.activations == graph.saved_activation_bytes
    model.zero_grad()
    out.pow(2).mean().backward()
    ref(x1).pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


def test_training_json_and_table_carry_the_new_columns(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    out = tmp_path / "train.json"
    argv = ["bench", "--train", "--models", "gpt", "--repeat", "2", "--warmup", "1"]
    argv += ["--no-peer", "--batch", "1", "--no-progress", "--json", str(out)]
    assert cli.main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["accuracy"] == "pass", row
    assert row["kernels_fw"] > 0 and row["kernels_bw"] > 0
    assert row["kernels_fw"] + row["kernels_bw"] == row["kernels"]
    assert row["op_fallbacks_fw"] == [] and row["op_fallbacks_bw"] == []
    # the min-cut saves no more than eager (it recomputes cheap chains eager keeps)
    assert 0 < row["saved_bytes"] <= row["eager_saved_bytes"]
    printed = capsys.readouterr().out
    assert "saved MB eager / tk" in printed
    assert f"{row['kernels_fw']}+{row['kernels_bw']}" in printed
    assert "kernels forward+backward" in " ".join(printed.split())


def test_inference_rows_keep_their_kernels_forward_and_save_nothing() -> None:
    spec = _tiny_spec()
    row = runner.run_model(spec, record.BenchConfig(peer=False, repeat=2, warmup=1, batch=2))
    assert row.accuracy == "pass", row
    assert row.kernels_fw == row.kernels > 0 and row.kernels_bw == 0
    assert row.saved_bytes is None and row.eager_saved_bytes is None
    assert "saved MB" not in table.render([row], width=200)


def _train_row(name: str, eager_mb: float, tk_mb: float) -> Row:
    return Row(
        name,
        "zoo",
        "cuda",
        "bfloat16",
        1,
        task="train",
        eager_ms=2.0,
        torchkiln_ms=1.0,
        speedup=2.0,
        eager_peak_mem_mb=eager_mb,
        peak_mem_mb=tk_mb,
        graphs=1,
        graph_breaks=0,
        kernels=5,
        kernels_fw=2,
        kernels_bw=3,
        op_fallbacks=["aten.a", "aten.b"],
        op_fallbacks_fw=["aten.a"],
        op_fallbacks_bw=["aten.a", "aten.b"],
        saved_bytes=3 * 2**20,
        eager_saved_bytes=5 * 2**20,
        accuracy="pass",
    )


def test_table_flags_peak_memory_above_eager() -> None:
    over, under = _train_row("over", 100.0, 120.5), _train_row("under", 100.0, 80.0)
    assert record.peak_above_eager(over) and not record.peak_above_eager(under)
    text = table.render([over, under], width=220)
    assert "100.0 / 120.5! / -" in text and "100.0 / 80.0 / -" in text
    assert "peak memory above eager's (marked !) on 1 of 2 models: over" in text
    assert "5.00 / 3.00" in text  # saved MB eager / tk
    assert "1 / 0 / 2+3 (+1+2 aten)" in text
