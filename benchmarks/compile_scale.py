"""Compile time against depth: a tiny-width BERT encoder, torchkiln.compile vs torch.compile.

    python benchmarks/compile_scale.py --layers 2,4,8,12 --train [--peer] [--profile DIR]

Each (compiler, depth) is measured in a fresh subprocess with fresh, empty cache directories
(TORCHKILN_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), so every number is a cold
compile. Compile time = wall time of the first compiled step minus that of an eager step; a
training step is forward, ``.sum()`` loss and backward. ``--profile DIR`` writes a cProfile of
each torchkiln compile (``DIR/tk-L<layers>.prof``). Standalone on purpose: the project's
``python -m torchkiln bench`` has its own compile-time benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def _model(layers: int):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=256,
        num_hidden_layers=layers,
        vocab_size=512,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    return model, ids


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the C++ compiler runs)."""
    import resource

    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def _child(args) -> None:
    import torch

    model, ids = _model(args.layers)
    if not args.train:
        model.eval()

    def step(m):
        if args.train:
            out = m(input_ids=ids).last_hidden_state
            out.sum().backward()
            return out
        with torch.no_grad():
            return m(input_ids=ids).last_hidden_state

    t0, c0 = time.perf_counter(), _cpu()
    ref = step(model)
    eager_s, eager_cpu = time.perf_counter() - t0, _cpu() - c0
    model.zero_grad(set_to_none=True)
    if args.compiler == "torchkiln":
        import torchkiln

        compiled = torchkiln.compile(model)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from peer import peer_compile

        compiled = peer_compile(model)
    prof = None
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0, c0 = time.perf_counter(), _cpu()
    out = step(compiled)
    first_s, first_cpu = time.perf_counter() - t0, _cpu() - c0
    if prof is not None:
        prof.disable()
        prof.dump_stats(os.path.join(args.profile, f"{args.compiler[:2]}-L{args.layers}.prof"))
    ok = torch.allclose(out, ref, atol=1e-4, rtol=1e-4)
    kernels = ""
    if args.compiler == "torchkiln":
        import torchkiln

        rep = torchkiln.report(compiled)
        kernels = str(rep.num_kernels)
    print(
        json.dumps(
            {
                "compile_s": first_s - eager_s,
                "compile_cpu_s": first_cpu - eager_cpu,
                "match": bool(ok),
                "kernels": kernels,
            }
        )
    )


def _measure(compiler: str, layers: int, train: bool, profile: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            TORCHKILN_CACHE_DIR=os.path.join(tmp, "tk"),
            TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
            TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
            # compile in-process, so that its CPU time is counted (a worker pool's is not)
            TORCHINDUCTOR_COMPILE_THREADS="1",
        )
        cmd = [sys.executable, __file__, "--child", compiler, "--layers", str(layers)]
        cmd += ["--train"] if train else []
        cmd += ["--profile", profile] if profile else []
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0:
            return {
                "error": p.stderr.strip().splitlines()[-1]
                if p.stderr.strip()
                else f"rc {p.returncode}"
            }
        return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="2,4,8,12")
    ap.add_argument(
        "--train", action="store_true", help="forward + sum loss + backward (default: inference)"
    )
    ap.add_argument("--peer", action="store_true", help="also time torch.compile")
    ap.add_argument(
        "--profile", default=None, help="directory for cProfile dumps of torchkiln compiles"
    )
    ap.add_argument("--json", default=None, help="write the rows to this file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        args.compiler = args.child
        args.layers = int(args.layers)
        _child(args)
        return
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    layers = [int(x) for x in args.layers.split(",")]
    rows = []
    print("compile seconds, wall (CPU)", flush=True)
    print(f"{'layers':>6} {'torchkiln':>16} {'torch.compile':>16}  match  kernels", flush=True)
    for n in layers:
        tk = _measure("torchkiln", n, args.train, args.profile)
        ind = _measure("inductor", n, args.train, None) if args.peer else {}
        rows.append((n, tk, ind))
        print(
            f"{n:>6} {_fmt(tk):>16} {_fmt(ind) if ind else '-':>16}  {tk.get('match', '-')!s:5}  "
            f"{tk.get('kernels', '')}",
            flush=True,
        )
    ok = [r for r in rows if "compile_s" in r[1]]
    if len(ok) >= 2:
        (n0, a, _), (n1, b, _) = ok[0], ok[-1]
        print(
            f"torchkiln {n1} layers / {n0} layers: {b['compile_s'] / a['compile_s']:.2f}x wall, "
            f"{b['compile_cpu_s'] / a['compile_cpu_s']:.2f}x CPU"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                [
                    {"layers": n, "train": args.train, "torchkiln": tk, "torch.compile": ind}
                    for n, tk, ind in rows
                ],
                f,
                indent=1,
            )


def _fmt(r: dict) -> str:
    if "compile_s" not in r:
        return r.get("error", "-")[:40]
    return f"{r['compile_s']:.1f} ({r['compile_cpu_s']:.1f})"


if __name__ == "__main__":
    main()
