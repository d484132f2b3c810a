"""Full-size compile time and step time: eager vs torchkiln vs torch.compile, one model, one process
per compiler (so one compiler's caches and failures never touch another's measurement).

    python3 benchmarks/gpu_scale.py --model bert-base --batch 16 --seq 512 --modes infer,train \
        --json $OUT/scale.json

Models come from transformers' default configs (no weights are downloaded): bert-base
(BertForMaskedLM), gpt2 (GPT2LMHeadModel), distilbert (DistilBertForMaskedLM). On CUDA the
forward runs under bfloat16 autocast; "train" is one step = forward, the model's loss, backward
(gradients checked against eager's once); "infer" runs under torch.no_grad in eval mode.
Per run the row holds: compile seconds (first call minus one eager call), median step ms of
`--repeat` steps, peak memory above the model's own, torchkiln's graph/kernel/fallback counts.
Each compiler runs in a subprocess under `--timeout` seconds; a hang dumps its stack
(faulthandler) into the row's log.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(name: str, device: str):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if name == "bert-base":
        model = tf.BertForMaskedLM(tf.BertConfig())
    elif name == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config())
    elif name == "distilbert":
        model = tf.DistilBertForMaskedLM(tf.DistilBertConfig())
    else:
        raise SystemExit(f"unknown model {name}")
    model.config.use_cache = False if hasattr(model.config, "use_cache") else None
    return model.to(device)


def inputs(model, batch: int, seq: int, device: str):
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g).to(device)
    return {"input_ids": ids, "labels": ids.clone()}


def one(args) -> dict:
    """One compiler, one mode, in this process."""
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(args.timeout - 15, exit=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build(args.model, device)
    batch = inputs(model, args.batch, args.seq, device)
    train = args.mode == "train"
    model.train(train)
    if train:  # dropout would make eager and compiled steps incomparable
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
    amp = (
        torch.autocast(device, dtype=torch.bfloat16)
        if device == "cuda"
        else torch.autocast(device, enabled=False)
    )

    if args.compiler == "torchkiln":
        import torchkiln

        compiled = torchkiln.compile(model)
    elif args.compiler == "inductor":
        sys.path.insert(0, str(HERE))
        from peer import peer_compile

        compiled = peer_compile(model)
    else:
        compiled = model

    def step(fn):
        if train:
            model.zero_grad(set_to_none=True)
            with amp:
                loss = fn(**batch).loss
            loss.backward()
            return loss
        with torch.no_grad(), amp:
            return fn(**batch).logits

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    step(model)
    sync()
    eager_first = time.perf_counter() - t0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base_mem = torch.cuda.memory_allocated() if device == "cuda" else 0
    t0 = time.perf_counter()
    step(compiled)
    sync()
    first = time.perf_counter() - t0
    for _ in range(args.warmup):
        step(compiled)
    sync()
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        step(compiled)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    row = {
        "model": args.model,
        "compiler": args.compiler,
        "mode": args.mode,
        "batch": args.batch,
        "seq": args.seq,
        "device": device,
        "step_ms": statistics.median(times),
        "step_ms_min": min(times),
        "step_ms_max": max(times),
        "compile_s": max(first - eager_first, 0.0) if args.compiler != "eager" else 0.0,
        "peak_mem_mb": (torch.cuda.max_memory_allocated() - base_mem) / 2**20
        if device == "cuda"
        else None,
    }
    if args.compiler == "torchkiln":
        import torchkiln

        rep = torchkiln.report(compiled)
        row.update(
            graphs=len(rep.graphs),
            graph_breaks=len(rep.graph_breaks),
            eager_fallbacks=len(rep.eager_fallbacks),
            kernels=sum(g.kernels for g in rep.graphs),
            op_fallbacks=sorted({f for g in rep.graphs for f in g.fallbacks}),
        )
    if train and args.compiler != "eager":  # gradients against eager's, once
        grads = {
            n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None
        }
        step(model)
        worst = 0.0
        for n, p in model.named_parameters():
            if p.grad is None or n not in grads:
                continue
            ref = p.grad.float()
            err = (grads[n] - ref).norm() / (ref.norm() + 1e-6)
            worst = max(worst, float(err))
        row["grad_rel_err_max"] = worst
    return row


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="bert-base")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--compilers", default="eager,torchkiln,inductor")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=int, default=280)
    p.add_argument("--json", default=None)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--compiler", help=argparse.SUPPRESS)
    p.add_argument("--mode", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print("ROW " + json.dumps(one(args)), flush=True)
        return
    rows = []
    for mode in args.modes.split(","):
        for compiler in args.compilers.split(","):
            cmd = [
                sys.executable,
                __file__,
                "--one",
                "--compiler",
                compiler,
                "--mode",
                mode,
                "--model",
                args.model,
                "--batch",
                str(args.batch),
                "--seq",
                str(args.seq),
                "--repeat",
                str(args.repeat),
                "--warmup",
                str(args.warmup),
                "--timeout",
                str(args.timeout),
            ]
            t0 = time.perf_counter()
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                out = done.stdout + done.stderr
            except subprocess.TimeoutExpired as e:
                out = (
                    (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                )
                out += "\nTIMEOUT"
            found = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ROW ")]
            row = (
                found[0]
                if found
                else {
                    "model": args.model,
                    "compiler": compiler,
                    "mode": mode,
                    "error": out.strip().splitlines()[-30:],
                }
            )
            row["wall_s"] = time.perf_counter() - t0
            rows.append(row)
            print(json.dumps(row), flush=True)
    by = {(r["mode"], r["compiler"]): r for r in rows}
    print(f"\n{args.model} batch {args.batch} seq {args.seq}")
    print(
        f"{'mode':6} {'compiler':10} {'step ms':>9} {'speedup':>8} {'compile s':>10} {'peak MB':>9}  notes"
    )
    for r in rows:
        eager = by.get((r["mode"], "eager"), {}).get("step_ms")
        ms = r.get("step_ms")
        sp = f"{eager / ms:.2f}x" if eager and ms else "-"
        notes = "" if "error" not in r else "error: " + (r["error"][-1] if r["error"] else "")
        if r.get("graphs") is not None:
            notes += f"graphs {r['graphs']} kernels {r['kernels']} fallbacks {r['op_fallbacks']} "
        if r.get("grad_rel_err_max") is not None:
            notes += f"grad err {r['grad_rel_err_max']:.2e}"
        print(
            f"{r['mode']:6} {r['compiler']:10} {ms or 0:9.2f} {sp:>8} {r.get('compile_s', 0) or 0:10.1f} "
            f"{r.get('peak_mem_mb') or 0:9.0f}  {notes}"
        )
    if args.json:
        meta = {
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "python": sys.version.split()[0],
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
