"""Compiled models under torch.distributed: two CPU processes with the gloo backend.

One ``torch.multiprocessing`` spawn trains every variant (eager DDP, ``DDP(compile(m))``,
``compile(DDP(m))``, eager FSDP2, ``compile(fully_shard(m))``) for a few SGD steps, each rank on
half of each batch; the test process trains the same model eagerly on the whole batches. Parameters
and the last step's gradients must agree with the eager distributed run and the single process.
The spawn runs once per session (a module fixture): starting two interpreters is the slow part.
"""

from __future__ import annotations

import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchkiln

WORLD = 2
STEPS = 3
BATCH = 8
SMALL_BUCKET = 600  # bytes: Linear(8, 16) holds 576
# float32: the reduced mean of two half batches vs one whole batch differs in the last bits
ATOL = 1e-6

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="this torch build has no torch.distributed gloo backend",
)


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _model(seed: int) -> Net:
    torch.manual_seed(seed)
    return Net()


def _batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed + 1)
    return [
        (torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 4, generator=g))
        for _ in range(STEPS)
    ]


def _full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor shard (FSDP2) gathered whole (a collective: every rank calls it), or the tensor."""
    full = t.full_tensor() if hasattr(t, "full_tensor") else t
    return full.detach().clone()


def _train(model: torch.nn.Module, call, seed: int, rank: int, world: int) -> dict:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    n = BATCH // world
    for x, y in _batches(seed):
        opt.zero_grad()
        out = call(x[rank * n : (rank + 1) * n])
        torch.nn.functional.mse_loss(out, y[rank * n : (rank + 1) * n]).backward()
        grads = {k: _full(p.grad) for k, p in model.named_parameters()}
        opt.step()
    params = {k: _full(p) for k, p in model.named_parameters()}
    return {"params": params, "grads": grads}


def _variant(name: str, seed: int, rank: int) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = _model(seed)
    if name == "ddp_eager":
        call = DDP(model)
    elif name == "ddp_of_compiled":
        # buckets of about one Linear: the captured graph is split at them (ddp_buckets.py)
        call = DDP(torchkiln.compile(model), bucket_cap_mb=SMALL_BUCKET / 2**20)
    elif name == "compiled_ddp":
        call = torchkiln.compile(DDP(model))
    else:
        mesh = init_device_mesh("cpu", (WORLD,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        call = torchkiln.compile(model) if name == "fsdp2_compiled" else model
    out = _train(model, call, seed, rank, WORLD)
    compiled = call.module if name == "ddp_of_compiled" else call
    if isinstance(compiled, torchkiln.CompiledModule):
        report = torchkiln.report(compiled)
        out["graphs"] = report.num_graphs
        out["fallbacks"] = [f.reason for f in report.eager_fallbacks]
        out["breaks"] = list(report.graph_breaks)
        out["splits"] = list(report.ddp_bucket_splits)
        out["extern"] = [op for g in report.graphs for op in g.extern_calls + g.fallbacks]
    return out


VARIANTS = ("ddp_eager", "ddp_of_compiled", "compiled_ddp", "fsdp2_eager", "fsdp2_compiled")


def _worker(rank: int, port: int, seed: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        results = {name: _variant(name, seed, rank) for name in VARIANTS}
        if rank == 0:
            torch.save(results, os.path.join(out_dir, "results.pt"))
    finally:
        dist.destroy_process_group()
    # The work is done and saved: leave without the interpreter's teardown, where native threads
    # (gloo's, oneDNN's) destroyed at exit once aborted a rank under a loaded CI machine
    # ("terminate called without an active exception", SIGABRT). An error above still raises.
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    seed = int(torch.randint(0, 2**31 - 1, ()).item())  # fresh weights and data each session
    out_dir = str(tmp_path_factory.mktemp("ddp"))
    ctx = mp.spawn(_worker, args=(_free_port(), seed, out_dir), nprocs=WORLD, join=False)
    deadline = time.monotonic() + 300
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the two gloo processes did not finish in 300 s (a hung collective?)")
    reference = _model(seed)
    single = _train(reference, reference, seed, 0, 1)
    return seed, torch.load(os.path.join(out_dir, "results.pt")), single


def _assert_close(got: dict, want: dict, what: str, seed: int) -> None:
    for key in ("params", "grads"):
        for name, w in want[key].items():
            g = got[key][name]
            err = (g - w).abs().max().item()
            assert err <= ATOL, f"{what}: {key} {name} is {err:.3g} away (seed {seed})"


@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_one_process(runs, variant):
    seed, results, single = runs
    _assert_close(results[variant], single, f"{variant} vs one eager process", seed)


@pytest.mark.parametrize(
    "variant,eager",
    [
        ("ddp_of_compiled", "ddp_eager"),
        ("compiled_ddp", "ddp_eager"),
        ("fsdp2_compiled", "fsdp2_eager"),
    ],
)
def test_matches_eager_distributed(runs, variant, eager):
    seed, results, _ = runs
    _assert_close(results[variant], results[eager], f"{variant} vs {eager}", seed)
    assert results[variant]["graphs"] >= 1, f"{variant}: nothing was compiled"
    fallbacks = results[variant]["fallbacks"]
    assert not fallbacks, f"{variant}: fell back to eager: {fallbacks}"


def test_wrapper_runs_in_python(runs):
    """compile(DDP(m)) breaks at DDP's call (its reducer calls run each step) and captures the
    wrapped model as one graph; compile(fully_shard(m)) breaks at each sharded block (their hooks
    all-gather), not at every layer: one graph per block plus the root's head."""
    _, results, _ = runs
    ddp = results["compiled_ddp"]
    assert ddp["graphs"] == 1
    assert any("DistributedDataParallel" in b for b in ddp["breaks"]), ddp["breaks"]
    assert not ddp["splits"], "one 25 MiB default bucket holds the whole model: no split"
    fsdp = results["fsdp2_compiled"]
    assert fsdp["graphs"] == 3, fsdp
    # FSDP's all-gathers and reduce-scatters ran in its hooks, outside every compiled graph
    assert not [op for op in fsdp["extern"] if "c10d" in op or "gather" in op or "scatter" in op]


def test_graph_split_at_ddp_buckets(runs):
    """Under DDP with small buckets the graph runs as pieces of about one bucket each (so a
    bucket's all-reduce can overlap the backward of the pieces before it), each compiled."""
    _, results, _ = runs
    split = results["ddp_of_compiled"]
    assert len(split["splits"]) == 1, split["splits"]
    assert split["graphs"] >= 3, split
    assert "pieces" in split["splits"][0]


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _backward_nodes(out: torch.Tensor) -> list[str]:
    seen, todo, names = set(), [out.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        todo.extend(fn for fn, _ in node.next_functions)
    return [n for n in names if n != "AccumulateGrad"]


@pytest.mark.parametrize("split", [True, False])
def test_bucket_pieces_are_separate_backward_steps(world_of_one, split):
    """Split at buckets, each piece is its own autograd node: a piece's parameters have their
    gradients (and DDP reduces their bucket) before the backward of the pieces before it runs.
    ``ddp_buckets=False`` keeps one graph, one backward node."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    mine, theirs = _model(seed), _model(seed)
    compiled = torchkiln.compile(
        DDP(mine, bucket_cap_mb=SMALL_BUCKET / 2**20), options={"ddp_buckets": split}
    )
    eager = DDP(theirs, bucket_cap_mb=SMALL_BUCKET / 2**20)
    x = torch.randn(BATCH, 8)
    got, want = compiled(x), eager(x)
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    nodes = _backward_nodes(got)
    got.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=ATOL, msg=f"{name} (seed {seed})")
    report = torchkiln.report(compiled)
    assert len(nodes) == report.num_graphs, (nodes, report.num_graphs)
    assert len(nodes) == (3 if split else 1), nodes
    assert len(report.ddp_bucket_splits) == (1 if split else 0), report.ddp_bucket_splits


def test_bucket_pieces_under_reduce_overhead_replay_and_match_eager(world_of_one, monkeypatch):
    """Under mode="reduce-overhead" each bucket piece's forward and backward are step graphs
    (cudagraph_steps.py; the CPU stand-in recorder here): SGD steps with replays match eager
    DDP's, and every piece's graphs replay."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torchkiln import cudagraph_steps

    recorder = cudagraph_steps.RecomputingRecorder()
    monkeypatch.setattr(cudagraph_steps, "RECORDER", recorder)
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    mine, theirs = _model(seed), _model(seed)
    compiled = torchkiln.compile(
        DDP(mine, bucket_cap_mb=SMALL_BUCKET / 2**20), mode="reduce-overhead"
    )
    eager = DDP(theirs, bucket_cap_mb=SMALL_BUCKET / 2**20)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (mine, theirs)]
    batches = _batches(seed) * 2  # STEPS twice: enough steps to replay
    for x, y in batches:
        for fn, opt in zip((compiled, eager), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(fn(x), y).backward()
            opt.step()
        for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(p, q, rtol=0, atol=ATOL, msg=f"{name} (seed {seed})")
    report = torchkiln.report(compiled)
    assert report.num_graphs == 3, report.num_graphs
    assert all(g.cudagraphs == "on" for g in report.graphs), [g.cudagraphs for g in report.graphs]
    # two observed steps, then each piece's forward and backward recorded and replayed
    assert recorder.captures == 2 * report.num_graphs
    assert recorder.replays == 2 * report.num_graphs * (len(batches) - 2)
