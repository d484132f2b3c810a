"""Achieved memory bandwidth of memory-bound kernels on the GPU: eager vs torchkiln vs
torch.compile on tensors of 100+ MB, as a fraction of the H200's 4.3 TB/s (issue "GPU speed at
real sizes": at least 85%).

Each case counts the bytes it must move at least (every input read once, every output written
once) and divides by the device time of one call, two ways (CUDA events, after warm-up): with
the queue kept full (``queued_ms``: the kernels' own throughput, the host's launch work hidden
behind earlier work, as in a model) and for one call timed alone (``median_ms``: the host's time
to launch it counts too, which shows as lost bandwidth on a 60-100 us kernel). A fused chain that
reaches the bound reads and writes each byte once; anything below says the kernel wastes
bandwidth (poor coalescing, too few programs, a second pass, a copy). The training cases (a
layer norm's, GELU's and softmax's backward) take what the forward saved as inputs. A result is
WRONG when it is more than 3% off eager's and, where eager's own 16-bit rounding is that far off
(column sums), more than twice as far from the float64 result as eager's.

    python3 benchmarks/gpu_bandwidth.py [--json out.json] [--peak-tbs 4.3] [--cases softmax]
        [--no-online-softmax] [--no-aligned-rows] [--looped-rblock 2048] [--split-programs N]

The batch-norm statistics before and after loop-ir's device-filling split:
    python3 benchmarks/gpu_bandwidth.py --cases "bn " --split-programs 0
    python3 benchmarks/gpu_bandwidth.py --cases "bn "
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _pointwise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2 + 1).relu() * y - x.sigmoid()


def _gelu_residual(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.gelu(x) + y


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _log_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(x, dim=-1)


def _cross_entropy(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x.float(), t)


def _layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], w, b)


def _row_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def _column_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=0)


def _add_layer_norm(
    x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    h = x + r
    return h, F.layer_norm(h, h.shape[-1:], w, b)


def _bn_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Training batch norm's statistics: a Welford reduction per channel over N, H, W."""
    return torch.var_mean(x, (0, 2, 3), correction=0)


def _bn_backward_sums(
    g: torch.Tensor, x: torch.Tensor, mean: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training batch norm's backward reductions: sum(g) and sum(g * (x - mean)) per channel."""
    # (a view, not mean[None, :, None, None]: indexing a CUDA tensor faked on a CPU-only torch
    # raises, and triton_kernel_resources.py traces these cases that way)
    return g.sum((0, 2, 3)), (g * (x - mean.view(1, -1, 1, 1))).sum((0, 2, 3))


def _layer_norm_backward(
    g: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, w: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """A training layer norm's backward, from the mean and 1/std its forward saved: the input's
    gradient (two row sums) and the weight's and bias's (two column sums)."""
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        g, x, [x.shape[-1]], mean, rstd, w, w, [True, True, True]
    )
    return dx, dw, db


def _gelu_backward(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.gelu_backward(g, x)


def _softmax_backward(g: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype)


def _max_pool_backward(x: torch.Tensor) -> Callable[..., torch.Tensor]:
    """ResNet's stem max-pool (3x3, stride 2, padding 1) backward over ``x``'s shape and layout:
    it reads the gradient and the indices, and writes the input's gradient (``x`` itself is
    not read, so it is not an input of the case)."""

    def fn(g: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.max_pool2d_with_indices_backward(
            g, x, [3, 3], [2, 2], [1, 1], [1, 1], False, indices
        )

    return fn


def _stem_pool_case(
    name: str, x: torch.Tensor
) -> tuple[str, Callable[..., Any], tuple[torch.Tensor, ...]]:
    values, indices = torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])
    return (name, _max_pool_backward(x), (torch.randn_like(values), indices))


def cases(
    dtype: torch.dtype, rows: int = 32768, width: int = 4096, device: str = "cuda"
) -> list[tuple[str, Callable[..., Any], tuple[torch.Tensor, ...]]]:
    """The default 32768 x 4096 is 128M elements: 256 MB in bfloat16, 512 MB in float32. The
    vocabulary-wide rows (32768, 50257: looped reductions, the online softmax) take an eighth
    of the rows: 4096 x 50257 is 206M elements. The batch-norm cases are ResNet-50's layer1 at
    batch 64 (``rows`` / 512 images of 256 x 56 x 56: 51M elements), contiguous (NCHW) and
    channels-last (NHWC): 256 outputs, each reducing 200704 values. The max-pool backward is
    ResNet-50's stem at the same batch (64 x 64 x 112 x 112 gradients written)."""

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, dtype=dtype)

    def image(channels_last: bool, channels: int = 256, side: int = 56) -> torch.Tensor:
        x = rand(max(1, rows // 512), channels, side, side)
        return x.to(memory_format=torch.channels_last) if channels_last else x

    vocab_rows = max(1, rows // 8)
    # what a training layer norm's forward saves for its backward: x, its mean and 1/std (in
    # the dtype the device's kernel keeps them: float32 on CUDA), and the weight
    ln_x, ln_w = rand(rows, width), rand(width)
    _, ln_mean, ln_rstd = torch.native_layer_norm(ln_x, [width], ln_w, ln_w, 1e-5)
    ln_saved = (ln_x, ln_mean, ln_rstd, ln_w)
    targets = torch.randint(0, 50257, (vocab_rows,), device=device)

    return [
        ("pointwise chain", _pointwise, (rand(rows, width), rand(rows, width))),
        ("gelu + residual", _gelu_residual, (rand(rows, width), rand(rows, width))),
        ("softmax (last dim)", _softmax, (rand(rows, width),)),
        ("layer norm", _layer_norm, (rand(rows, width), rand(width), rand(width))),
        (
            "add + layer norm",
            _add_layer_norm,
            (rand(rows, width), rand(rows, width), rand(width), rand(width)),
        ),
        ("row sum", _row_sum, (rand(rows, width),)),
        ("column sum", _column_sum, (rand(rows, width),)),
        ("softmax (rows of 50257)", _softmax, (rand(vocab_rows, 50257),)),
        ("log_softmax (32768)", _log_softmax, (rand(vocab_rows, 32768),)),
        ("cross-entropy (50257)", _cross_entropy, (rand(vocab_rows, 50257), targets)),
        ("bn stats nchw", _bn_stats, (image(False),)),
        ("bn stats nhwc", _bn_stats, (image(True),)),
        ("bn bwd sums nchw", _bn_backward_sums, (image(False), image(False), rand(256))),
        ("bn bwd sums nhwc", _bn_backward_sums, (image(True), image(True), rand(256))),
        ("layer norm backward", _layer_norm_backward, (rand(rows, width), *ln_saved)),
        ("gelu backward", _gelu_backward, (rand(rows, width), rand(rows, width))),
        ("softmax backward", _softmax_backward, (rand(rows, width), rand(rows, width).softmax(-1))),
        _stem_pool_case("max-pool bwd nchw", image(False, 64, 112)),
        _stem_pool_case("max-pool bwd nhwc", image(True, 64, 112)),
    ]


def _bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return sum(_bytes(v) for v in value)


def _close(got: Any, reference: Any, exact: Callable[[], Any] | None = None) -> bool:
    """Each output within 3% of eager's; or, where eager's own rounding is further off than
    that (16-bit column sums), at most twice as far from the float64 result (``exact()``,
    computed only then) as eager's."""
    pairs = list(zip(_flat(got), _flat(reference), strict=True))
    near = [torch.allclose(a.float(), b.float(), atol=3e-2, rtol=3e-2) for a, b in pairs]
    if all(near) or exact is None:
        return all(near)
    for (a, b), ok, e in zip(pairs, near, _flat(exact()), strict=True):
        if not ok:
            ours, eagers = (a.double() - e).abs().max(), (b.double() - e).abs().max()
            if ours > 2 * eagers + 1e-3 * (1 + e.abs().max()):
                return False
    return True


def exact_of(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Callable[[], Any]:
    """``fn`` on the inputs widened to float64, when called."""
    return lambda: fn(*(t.double() if t.is_floating_point() else t for t in inputs))


def kernel_times(fn: Callable[[], Any], calls: int = 5) -> list[tuple[str, float]]:
    """Device microseconds per call of each kernel ``fn`` launches (torch.profiler), slowest
    first: which of a case's kernels is far from the bandwidth."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    activities = [ProfilerActivity.CPU] + (
        [ProfilerActivity.CUDA] if torch.cuda.is_available() else []
    )
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    times = [
        (e.key, e.device_time_total / calls)
        for e in prof.key_averages()
        if e.device_time_total > 0 and e.device_type.name == "CUDA"
    ]
    return sorted(times, key=lambda kv: -kv[1])


def _flat(value: Any) -> tuple[torch.Tensor, ...]:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def median_ms(fn: Callable[[], Any], reps: int = 30) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if not torch.cuda.is_available():  # the CPU dry run
            start_s = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start_s) * 1000)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def queued_ms(fn: Callable[[], Any], calls: int = 10, reps: int = 7) -> float:
    """Device ms per call of ``fn`` with the queue kept full: a ``torch.cuda._sleep`` of about a
    millisecond is enqueued first, so the host's launch work for the ``calls`` calls between
    the two events overlaps it and the kernels run back to back (as in a model, where the host
    runs ahead). ``median_ms`` times one call between two events: it also counts the host's
    time to launch that call, which a 60-100 us kernel shows as a loss of bandwidth."""
    fn()
    if not torch.cuda.is_available():  # the CPU dry run
        start_s = time.perf_counter()
        fn()
        return (time.perf_counter() - start_s) * 1000
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--peak-tbs", type=float, default=4.3)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--hang-s", type=float, default=280)
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--width", type=int, default=4096, help="the rows' length (4096)")
    parser.add_argument("--device", default="cuda", help="cpu: a small dry run of the script")
    parser.add_argument(
        "--cases", default="", help="only cases whose name contains one of these (commas)"
    )
    parser.add_argument(
        "--split-programs",
        type=int,
        default=None,
        help="LoopIROptions.split_programs: 0 keeps long reductions into many outputs in one "
        "pass (the batch-norm cases before the device-filling split); default: the GPU's",
    )
    parser.add_argument(
        "--no-online-softmax",
        action="store_true",
        help="torchkiln without the online softmax (three passes over a looped row)",
    )
    parser.add_argument(
        "--no-aligned-rows",
        action="store_true",
        help="torchkiln without the aligned walk (scalar accesses over rows of 50257)",
    )
    parser.add_argument(
        "--looped-rblock",
        type=int,
        default=None,
        help="TritonOptions.looped_rblock (default 4096): the block of a looped row",
    )
    parser.add_argument(
        "--triton-options",
        default="{}",
        help="more TritonOptions fields for torchkiln, as JSON (e.g. '{\"eviction_hints\": false}')",
    )
    parser.add_argument(
        "--loop-ir",
        default="{}",
        help="LoopIROptions fields for torchkiln, as JSON (e.g. "
        "'{\"mixed_order_reductions\": false}')",
    )
    parser.add_argument(
        "--compilers",
        default="eager,torchkiln,inductor",
        help="which of eager, torchkiln, inductor to run (a variant of torchkiln's options alone)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also print each compiler's kernels with their device time per call (torch.profiler)",
    )
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    import torchkiln

    kiln_options: dict[str, Any] = {}
    more = json.loads(args.triton_options)
    if args.no_online_softmax or args.no_aligned_rows or args.looped_rblock or more:
        from torchkiln_codegen_triton import TritonOptions

        kiln_options["triton_options"] = TritonOptions(
            online_softmax=not args.no_online_softmax,
            aligned_rows=not args.no_aligned_rows,
            **({"looped_rblock": args.looped_rblock} if args.looped_rblock else {}),
            **more,
        )
    if args.split_programs is not None:
        kiln_options["loop_ir"] = {"split_programs": args.split_programs}
    if json.loads(args.loop_ir):
        kiln_options["loop_ir"] = kiln_options.get("loop_ir", {}) | json.loads(args.loop_ir)

    rows = []
    print(
        f"{'case':24s} {'dtype':9s} {'MB':>6s} | "
        + " | ".join(f"{c:>20s}" for c in ("eager", "torchkiln", "inductor"))
    )
    print(
        "each cell: GB/s and % of the peak with the queue kept full (queued_ms), then in "
        "parentheses the % for one call timed alone (median_ms: the host's launch time counts)"
    )
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for name, fn, inputs in cases(dtype, args.rows, args.width, device=args.device):
            if not any(c in name for c in args.cases.split(",")):
                continue
            with torch.no_grad():
                moved = _bytes(inputs) + _bytes(fn(*inputs))
                row: dict[str, Any] = {"case": name, "dtype": dtype_name, "bytes": moved}
                wanted = args.compilers.split(",")
                compiled = {
                    label: make()
                    for label, make in (
                        ("eager", lambda fn=fn: fn),
                        ("torchkiln", lambda fn=fn: torchkiln.compile(fn, options=kiln_options)),
                        ("inductor", lambda fn=fn: torch.compile(fn)),
                    )
                    if label in wanted
                }
                reference = fn(*inputs)
                for label, f in compiled.items():
                    try:
                        got = f(*inputs)
                        ok = _close(got, reference, exact_of(fn, inputs))
                        ms = median_ms(lambda f=f, inputs=inputs: f(*inputs))
                        queued = queued_ms(lambda f=f, inputs=inputs: f(*inputs))
                        gbs, queued_gbs = moved / ms / 1e6, moved / queued / 1e6
                        if args.profile and label != "eager":
                            row.setdefault("kernels", {})[label] = kernel_times(
                                lambda f=f, inputs=inputs: f(*inputs)
                            )
                        row[label] = {
                            "ms": ms,
                            "gb_s": gbs,
                            "fraction_of_peak": gbs / (args.peak_tbs * 1000),
                            "queued_ms": queued,
                            "queued_gb_s": queued_gbs,
                            "queued_fraction_of_peak": queued_gbs / (args.peak_tbs * 1000),
                            "matches_eager": ok,
                        }
                    except Exception as error:  # noqa: BLE001 - one case must not stop the run
                        row[label] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
                rows.append(row)

            def cell(r: dict[str, Any]) -> str:
                if "error" in r:
                    return f"{'error':>20s}"
                mark = "" if r["matches_eager"] else " WRONG"
                return (
                    f"{r['queued_gb_s']:5.0f} {100 * r['queued_fraction_of_peak']:3.0f}% "
                    f"({100 * r['fraction_of_peak']:3.0f}%){mark:>6s}"
                )

            print(
                f"{name:24s} {dtype_name:9s} {moved / 2**20:6.0f} | "
                + " | ".join(cell(row[k]) for k in ("eager", "torchkiln", "inductor") if k in row),
                flush=True,
            )
            for label, kernels in row.get("kernels", {}).items():
                for kernel, us in kernels[:6]:
                    print(f"    {label:9s} {us:8.1f} us  {kernel[:90]}")
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "peak_tb_s": args.peak_tbs,
                    "online_softmax": not args.no_online_softmax,
                    "split_programs": args.split_programs,
                    "aligned_rows": not args.no_aligned_rows,
                    "looped_rblock": args.looped_rblock,
                    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
