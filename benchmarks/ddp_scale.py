"""Training throughput under DistributedDataParallel: eager, torch.compile and torchkiln, on one
and on several processes (one GPU each with NCCL; on a machine without CUDA, CPU processes with
gloo, for a smoke run).

    python3 benchmarks/ddp_scale.py --model gpt2 --world 1,2 --compilers eager,inductor,torchkiln \
        --batch 8 --seq 512 --steps 20 --json $OUT/ddp.json
    python3 benchmarks/ddp_scale.py --model tiny --world 2 --batch 4 --seq 32 --steps 3   # CPU smoke

Each (world size, compiler) runs in its own ``torch.multiprocessing`` spawn, so compilers never
share caches. Every rank trains ``compile(DDP(model))`` (``DDP(model)`` for eager) on its own
``--batch`` sequences per step (the global batch grows with the world size: weak scaling) with
SGD, the same seeded data for every compiler. Rank 0 reports: the loss of every step (the curve
to compare with eager's), the median step time after ``--warmup`` steps, tokens/s over all ranks,
and for torchkiln its report (graphs, bucket splits, fallbacks). Scaling = tokens/s at world N /
tokens/s at world 1 of the same compiler. On CUDA the forward runs under bfloat16 autocast.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(name: str):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if name == "gpt2":
        config = tf.GPT2Config()
    elif name == "tiny":
        config = tf.GPT2Config(
            n_layer=2,
            n_head=2,
            n_embd=64,
            vocab_size=512,
            n_positions=128,
            bos_token_id=0,
            eos_token_id=0,
        )
    else:
        raise SystemExit(f"unknown model {name}")
    config.use_cache = False
    for key in ("resid_pdrop", "embd_pdrop", "attn_pdrop"):  # eager and compiled must be comparable
        setattr(config, key, 0.0)
    return tf.GPT2LMHeadModel(config)


def worker(rank: int, world: int, port: int, args, out_path: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = torch.cuda.is_available()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    model = build(args.model).to(device)
    ddp = DDP(model, device_ids=[rank] if cuda else None)
    if args.compiler == "torchkiln":
        import torchkiln

        step_fn = torchkiln.compile(ddp)
    elif args.compiler == "inductor":
        sys.path.insert(0, str(HERE))
        from peer import peer_compile

        step_fn = peer_compile(ddp)
    else:
        step_fn = ddp
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1 + rank)
    amp = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if cuda
        else torch.autocast("cpu", enabled=False)
    )
    losses, times = [], []
    for _ in range(args.steps):
        ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=g).to(
            device
        )
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with amp:
            loss = step_fn(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    if rank == 0:
        timed = times[args.warmup :] or times
        step_s = statistics.median(timed)
        row = {
            "model": args.model,
            "compiler": args.compiler,
            "world": world,
            "device": str(device),
            "batch_per_rank": args.batch,
            "seq": args.seq,
            "losses": losses,
            "first_step_s": times[0],
            "median_step_s": step_s,
            "tokens_per_s": world * args.batch * args.seq / step_s,
        }
        if args.compiler == "torchkiln":
            import torchkiln

            report = torchkiln.report(step_fn)
            row.update(
                graphs=report.num_graphs,
                graph_breaks=len(report.graph_breaks),
                bucket_splits=report.ddp_bucket_splits,
                fallbacks=[f.reason for f in report.eager_fallbacks],
            )
        Path(out_path).write_text(json.dumps(row))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    import torch
    import torch.multiprocessing as mp

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2", choices=["gpt2", "tiny"])
    p.add_argument("--world", default="1,2", help="comma-separated world sizes")
    p.add_argument("--compilers", default="eager,inductor,torchkiln")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the median")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    rows = []
    for world in (int(w) for w in args.world.split(",")):
        if torch.cuda.is_available() and world > torch.cuda.device_count():
            rows.append({"world": world, "skipped": f"only {torch.cuda.device_count()} GPUs"})
            continue
        for compiler in args.compilers.split(","):
            args.compiler = compiler
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "row.json")
                try:
                    mp.spawn(worker, args=(world, _free_port(), args, out), nprocs=world)
                    row = json.loads(Path(out).read_text())
                except Exception as e:  # noqa: BLE001 - a failing compiler is a row, not the end
                    row = {
                        "model": args.model,
                        "compiler": compiler,
                        "world": world,
                        "error": f"{type(e).__name__}: {str(e).strip().splitlines()[-1:]}",
                    }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "losses"}), flush=True)
    by_key = {(r.get("compiler"), r.get("world")): r for r in rows if "tokens_per_s" in r}
    for r in rows:
        one = by_key.get((r.get("compiler"), 1))
        if "tokens_per_s" in r and one is not None:
            r["scaling_vs_world_1"] = r["tokens_per_s"] / one["tokens_per_s"]
        eager = by_key.get(("eager", r.get("world")))
        if "losses" in r and eager is not None and r is not eager:
            r["max_loss_diff_vs_eager"] = max(
                abs(a - b) for a, b in zip(r["losses"], eager["losses"])
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    for r in rows:
        print(
            r.get("compiler"),
            r.get("world"),
            {
                k: r[k]
                for k in (
                    "tokens_per_s",
                    "scaling_vs_world_1",
                    "max_loss_diff_vs_eager",
                    "error",
                    "skipped",
                )
                if k in r
            },
        )


if __name__ == "__main__":
    main()
