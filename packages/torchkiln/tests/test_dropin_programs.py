"""More user programs run both ways, torch.compile-style and through torchkiln with the same
arguments (test_dropin.py has the argument matrix): a program with a graph break, a training
step, the peer torch.compile(backend="inductor") itself, torch.compile with torchkiln's backend
and an options dict (debug_dir included), and how many graphs each side hands its backend.
Every result is checked against eager."""

from __future__ import annotations

import io
import warnings

import torch
import torchkiln

SINK = io.StringIO()


def with_break(x):
    y = torch.sin(x) * 2.0
    print("break", file=SINK)  # I/O capture cannot hold: a graph break
    return torch.cos(y).sum(dim=0) + x.mean()


def _counting(calls: list):
    def backend(gm, example_inputs, **kwargs):
        calls.append(
            sum(1 for n in gm.graph.nodes if n.op == "call_function" or n.op == "call_method")
        )
        return gm.forward

    return backend


def test_a_graph_break_splits_alike_and_runs_its_python_once_per_call() -> None:
    torch.compiler.reset()
    peer_graphs: list = []
    ours_graphs: list = []
    peer = torch.compile(with_break, backend=_counting(peer_graphs), mode=None)
    ours = torchkiln.compile(with_break, backend=_counting(ours_graphs), mode=None)
    for _ in range(2):
        x = torch.randn(5, 3)
        want = with_break(x)
        for compiled in (peer, ours):
            SINK.seek(0)
            SINK.truncate()
            torch.testing.assert_close(compiled(x), want)
            assert SINK.getvalue() == "break\n"
    # both split the function in two graphs (before and after the break), each captured once
    assert peer_graphs == ours_graphs and len(ours_graphs) == 2, (peer_graphs, ours_graphs)


def test_a_graph_break_through_our_pipeline_compiles_every_graph() -> None:
    ours = torchkiln.compile(with_break, mode=None, options={"strict": True})
    x = torch.randn(5, 3)
    torch.testing.assert_close(ours(x), with_break(x))
    report = torchkiln.report(ours)
    assert len(report.graphs) == 2 and not report.eager_fallbacks
    assert all(g.artifacts.get("forward.wrapper") for g in report.graphs)


def _train_step(compiled, model, x, target):
    loss = torch.nn.functional.mse_loss(compiled(x), target)
    return loss, torch.autograd.grad(loss, list(model.parameters()))


def test_a_training_step_matches_through_torch_compile_with_torchkilns_backend() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    x, target = torch.randn(6, 8), torch.randn(6, 2)
    want_loss, want_grads = _train_step(model, model, x, target)
    for compiled in (
        torch.compile(model, backend=torchkiln.backend, options={"strict": True}),
        torchkiln.compile(model, backend="torchkiln", options={"strict": True}),
        torchkiln.compile(model, backend="inductor", mode=None, options={"strict": True}),
    ):
        loss, grads = _train_step(compiled, model, x, target)
        torch.testing.assert_close(loss, want_loss)
        for g, w in zip(grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def program(x, y):
    return torch.nn.functional.gelu(x @ y).softmax(dim=-1) * 2.0


def test_the_inductor_peer_and_torchkiln_give_eagers_results_with_the_same_arguments() -> None:
    """The peer as the issue names it: torch.compile(backend="inductor") (PyTorch's compiler on
    CPU), against torchkiln.compile with the same arguments ("inductor" is our pipeline there)."""
    kwargs = {"backend": "inductor", "mode": None, "options": {"max_autotune": False}}
    torch.compiler.reset()
    peer = torch.compile(program, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # max_autotune is a name we map: no warning
        ours = torchkiln.compile(program, **kwargs)
    x, y = torch.randn(4, 6), torch.randn(6, 5)
    want = program(x, y)
    torch.testing.assert_close(peer(x, y), want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours(x, y), want, rtol=1e-4, atol=1e-5)
    report = torchkiln.report(ours)
    assert len(report.graphs) == 1 and report.num_kernels >= 1 and not report.eager_fallbacks


def test_torch_compile_with_our_backend_writes_the_debug_dir(tmp_path) -> None:
    torch.compiler.reset()
    compiled = torch.compile(
        program, backend=torchkiln.backend, options={"debug_dir": str(tmp_path), "strict": True}
    )
    x, y = torch.randn(4, 6), torch.randn(6, 5)
    torch.testing.assert_close(compiled(x, y), program(x, y))
    (folder,) = list(tmp_path.iterdir())
    assert folder.name == "torch_compile_0"
    for name in (
        "fx_graph.py",
        "aten_forward.py",
        "loop_ir_forward.txt",
        "fusion_forward.txt",
        "wrapper_forward.py",
        "timing.json",
        "perf_hints.txt",
        "guards.py",
    ):
        assert (folder / name).read_text().strip(), name
    assert "torch.compile's own capture" in (folder / "guards.py").read_text()


def test_hooks_reset_and_disable_together() -> None:
    model = torch.nn.Linear(4, 3)
    peer = torch.compile(model, backend="eager")
    ours = torchkiln.compile(model, options={"strict": True})
    seen: list = []
    for compiled in (peer, ours):
        compiled.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    x = torch.randn(2, 4)
    for compiled in (peer, ours):
        torch.testing.assert_close(compiled(x), model(x))
    assert seen == [torch.Size([2, 3])] * 2
    torch.compiler.reset()
    torchkiln.reset()
    assert torchkiln.report(ours).graphs == []  # forgotten
    torch.testing.assert_close(ours(x), model(x))
    assert len(torchkiln.report(ours).graphs) == 1  # compiled afresh
    assert torchkiln.compile(model, disable=True, mode=None) is model
