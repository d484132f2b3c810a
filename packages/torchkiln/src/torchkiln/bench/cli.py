"""Argument parsing and the commands: ``bench``, ``overhead``, ``repro`` and ``minify``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import warnings
from typing import Any

from torchkiln import __version__
from torchkiln.bench import compile_time, meta, overhead, record, runner, suites, table
from torchkiln.bench.plot import plot_speedups
from torchkiln.minify import minify
from torchkiln.repro import NotReproducible, repro_from_folder


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--suite",
        default="zoo",
        type=_suites,
        help=f"comma-separated suites: {', '.join(suites.SUITES)}, or all (default zoo)",
    )
    parser.add_argument(
        "--size",
        default=None,
        choices=list(suites.SIZES),
        help="model sizes: small (CI configs) or full (the libraries' defaults at the batch and "
        "sequence people run); default full on cuda, small on cpu",
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="time a training step (forward, loss, backward, AdamW; autocast for 16-bit dtypes) "
        "and check gradients instead of inference",
    )
    parser.add_argument(
        "--models", default="", help="comma-separated model names (default: all of the suite)"
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=list(record.DTYPES))
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help=f"batch size (default: each model's full-size batch, or {record.DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--mode", default="default", choices=["default", "reduce-overhead", "max-autotune"]
    )
    parser.add_argument("--no-peer", action="store_true", help="skip torch.compile")
    parser.add_argument(
        "--repeat",
        type=int,
        default=20,
        help="timed rounds, each running every variant once (default 20); speedups are medians "
        "of the per-round ratios, with a 90%% interval from 5 rounds on",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "cpu"],
        help="how CPU runs are timed: wall time (default) or the process's CPU time, which on a "
        "machine shared with other jobs does not count waiting for a core; use it with one "
        "thread (OMP_NUM_THREADS=1), since with more it counts OpenMP's spinning",
    )
    parser.add_argument(
        "--strict", action="store_true", help="internal torchkiln errors fail the model"
    )
    parser.add_argument(
        "--options",
        type=_options,
        default={},
        help='more torchkiln.compile options, a JSON object (e.g. \'{"loop_ir": '
        '{"split_programs": 0}}\'): one run compares a setting against eager and torch.compile',
    )
    parser.add_argument(
        "--json", dest="json_path", default=None, help="write rows and meta to this file"
    )
    parser.add_argument("--plot", default=None, help="write a PNG bar chart of the speedups")
    parser.add_argument("--no-progress", action="store_true")
    timing = parser.add_argument_group(
        "compile time",
        "--compile-time: compile seconds of a transformer encoder by depth, "
        "cold and warm cache, each compile in a new process (bench/compile_time.py)",
    )
    timing.add_argument(
        "--compile-time",
        action="store_true",
        help="measure compile time instead of running the model suites",
    )
    timing.add_argument(
        "--layers", default="1,2,4,8,12,24", help="encoder depths (default %(default)s)"
    )
    # --train (above) with --compile-time: training steps only
    timing.add_argument("--inference", action="store_true", help="inference steps only")
    timing.add_argument("--hidden", type=int, default=64, help="encoder width (default 64)")
    timing.add_argument("--seq", type=int, default=16, help="sequence length (default 16)")
    timing.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds one compile may take before it is recorded as unfinished",
    )


def _options(text: str) -> dict[str, Any]:
    """``--options``: a JSON object of CompileOptions fields (checked here, before any model
    runs: a misspelt name must not cost a GPU run)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("a JSON object of option names and values")
    from torchkiln.options import resolve_options

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an ignored (unknown) name is an error here
            # checks the fields of loop_ir and of the code generators' dicts too
            resolve_options(value)
    except (TypeError, ValueError, UserWarning, ImportError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _suites(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(suites.SUITES)
    unknown = [n for n in names if n not in suites.SUITES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown suite(s) {', '.join(unknown) or repr(text)}; pick from "
            f"{', '.join(suites.SUITES)} or all"
        )
    return names


def bench(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    if args.compile_time:
        return compile_time.command(args, argv)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        # checked before the run, not after it: a long run should not end in an ImportError
        print("torchkiln bench: --plot needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    names = args.suite if isinstance(args.suite, list) else _suites(args.suite)
    size = args.size or ("full" if args.device == "cuda" else "small")
    specs: list[suites.ModelSpec] = []
    for name in names:
        try:
            specs += suites.load_suite(name, size)
        except suites.SuiteUnavailable as error:
            print(f"torchkiln bench: {error}", file=sys.stderr)
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = sorted(set(wanted) - {s.name for s in specs})
        if unknown:
            print(
                f"torchkiln bench: unknown model(s) {', '.join(unknown)}; available: "
                f"{', '.join(s.name for s in specs)}",
                file=sys.stderr,
            )
            return 2
        specs = [s for s in specs if s.name in wanted]
    config = record.BenchConfig(
        device=args.device,
        dtype=args.dtype,
        batch=args.batch,
        mode=args.mode,
        peer=not args.no_peer,
        repeat=args.repeat,
        warmup=args.warmup,
        strict=args.strict,
        train=args.train,
        size=size,
        clock=args.clock,
        compile_options=tuple(sorted(args.options.items())),
    )
    options = {k: v for k, v in vars(args).items() if k not in ("func",)}

    def finished(rows_so_far: list[record.Row]) -> None:
        # one line per model as it ends, and the JSON rewritten: a run cut short by a time limit
        # keeps what it measured
        last = rows_so_far[-1]
        print(
            f"torchkiln bench: {last.suite}/{last.model} done ({len(rows_so_far)}/{len(specs)})",
            file=sys.stderr,
            flush=True,
        )
        if args.json_path:
            meta.write_result(
                args.json_path,
                meta.collect(args.device, options, argv),
                rows=[r.as_dict() for r in rows_so_far],
            )

    rows = runner.run_models(
        specs, config, progress=not args.no_progress and sys.stderr.isatty(), on_row=finished
    )
    print(
        table.render(
            rows,
            title=f"torchkiln benchmark ({'training step' if args.train else 'inference'}, "
            f"{args.device}, {args.dtype}, {size} size, batch {args.batch or 'per model'})",
        )
    )
    if args.json_path:
        meta.write_result(
            args.json_path,
            meta.collect(args.device, options, argv),
            rows=[r.as_dict() for r in rows],
        )
    if args.plot and rows:
        plot_speedups(rows, args.plot)
    return 0


def overhead_command(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    result = overhead.run_overhead(repeat=args.repeat, calls=args.calls, peer=not args.no_peer)
    print(overhead.render(result))
    if args.json_path:
        options = {k: v for k, v in vars(args).items() if k not in ("func",)}
        meta.write_result(args.json_path, meta.collect("cpu", options, argv), result=result)
    return 0


def repro_command(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    try:
        path = repro_from_folder(args.folder)
    except NotReproducible as error:
        print(f"torchkiln repro: {error}", file=sys.stderr)
        return 2
    print(f"wrote {path}; run it with: python {path}")
    return 0


def minify_command(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    try:
        minify(args.script, args.out)
    except NotReproducible as error:
        print(f"torchkiln minify: {error}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m torchkiln", description="torchkiln command line"
    )
    parser.add_argument("--version", action="version", version=f"torchkiln {__version__}")
    commands = parser.add_subparsers(dest="command")
    bench_parser = commands.add_parser(
        "bench", help="benchmark eager vs torchkiln vs torch.compile"
    )
    add_bench_arguments(bench_parser)
    bench_parser.set_defaults(func=bench)
    over = commands.add_parser(
        "overhead", help="per-call overhead of compiled calls and of capture"
    )
    over.add_argument("--repeat", type=int, default=30)
    over.add_argument("--calls", type=int, default=200, help="calls per timed sample")
    over.add_argument("--no-peer", action="store_true")
    over.add_argument("--json", dest="json_path", default=None)
    over.set_defaults(func=overhead_command)
    repro = commands.add_parser(
        "repro", help="write a standalone repro script for a TORCHKILN_DEBUG_DIR graph folder"
    )
    repro.add_argument("folder", help="a <debug dir>/<function>_<n> folder")
    repro.set_defaults(func=repro_command)
    mini = commands.add_parser(
        "minify", help="shrink a failing repro script (nodes, then max_fusions)"
    )
    mini.add_argument("script", help="a repro.py written by torchkiln")
    mini.add_argument("--out", default=None, help="where to write (default <script>_min.py)")
    mini.set_defaults(func=minify_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return args.func(args, argv)
