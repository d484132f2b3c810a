"""Registers, spills, load width and instructions per value of torchkiln's Triton kernels for
the memory-bound cases of gpu_bandwidth.py, compiled for an H100/H200 (sm_90) on any machine: no
GPU needed (Triton's own compiler and ptxas, CUDA tensors faked with FakeTensorMode).

A persistent reduction holds its row in registers: this is the check that a heuristic change
(``autotune.reduction_config``) does not make a kernel spill (LOCAL > 0) or lose its 16-byte
vector loads (``ld.global.v4.b32``) before the GPU run measures it. Registers depend on
Triton's version: for the H200's occupancy run it with the device's Triton, in a venv of its
own (``pip install torch==2.13.0 triton==3.6.0`` and the packages; session 21: the aligned
walk's kernel took 42 registers a thread under 3.6, one program of 32 warps a SM, where 3.9
reports 32).

The SASS (``cuobjdump -sass``) gives, per loop (a branch back to an earlier address), its
instructions per value a thread handles in one iteration and its MUFU (exp2, reciprocal, ...)
per value; a kernel without a loop, its whole count per value. The budget, for an H200 at 4.3
TB/s streaming bfloat16 (2.15e12 values a second read once): it issues about 33e12 thread
instructions a second (132 SMs x 4 schedulers x 32 lanes x 1.98 GHz), so about 15 instructions
per value read once (30 per value read and written) before issue, not memory, is the limit, and
its MUFU units (16 a clock per SM) give about 2 MUFU per value read. A loop above either cannot
reach the bandwidth.

    python3 benchmarks/triton_kernel_resources.py [--widths 1000,4096,8192] [--dtypes bfloat16]
        [--cases "softmax (rows"] [--options '{"persistent_rnumel": 32768}'] [--no-online-softmax]

``--depthwise`` reports loop-ir's direct depthwise convolutions instead (``hardswish(conv +
bias)`` on a channels-last input, shapes of MobileNetV3 / EfficientNet-B0 / ConvNeXt at their
benchmark batch sizes): a loop bound by its instructions, about ten a tap per output value.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # the GPU form of every kernel (read per call)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_bandwidth  # noqa: E402
import sympy  # noqa: E402
import torch  # noqa: E402
import torchkiln_loop_ir as loop_ir  # noqa: E402
import triton  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402
from torchkiln_codegen_triton import TritonBackend, TritonOptions  # noqa: E402
from torchkiln_codegen_triton._assemble import arg_names  # noqa: E402
from torchkiln_codegen_triton._split import finish_blocks  # noqa: E402
from torchkiln_loop_ir.backend import PROGRAMS_PER_SM  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

_TYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "i1",
}


class _RecordingBackend(TritonBackend):
    """The Triton backend, keeping the specs of the kernels it compiled (for their dtypes)."""

    specs: list = []

    def compile_kernels(self, kernels):
        self.specs = list(kernels)
        return super().compile_kernels(kernels)


def _signature(jit, spec, kernel, finish):
    """Triton's signature, constexprs and 16-divisibility attributes for one of ``kernel``'s
    functions, as the launch would specialise them (aligned tensors; ``xnumel`` and ``rnumel``
    by their values, other sizes taken as divisible by 16)."""
    cfg = kernel.config
    dtypes = {ptr: spec.buffers[name].dtype for name, ptr in arg_names(spec).items()}
    dtypes |= {f"part_ptr{i}": dt for i, dt in enumerate(cfg.partials)}
    xnumel = int(sympy.prod(spec.xranges))
    rnumel = int(sympy.prod(spec.rranges)) if spec.rranges else 0
    xblock, rblock = finish_blocks(cfg.split, xnumel) if finish else (cfg.xblock, cfg.rblock)
    sig, consts, attrs = {}, {}, {}
    for i, p in enumerate(jit.arg_names):
        if p in dtypes:
            sig[p] = "*" + _TYPES[dtypes[p]]
        elif p in ("XBLOCK", "RBLOCK"):
            sig[p] = "constexpr"
            consts[p] = xblock if p == "XBLOCK" else rblock
            continue
        else:
            sig[p] = "*i32" if p == "tk_status" else "i32"
            known = {"xnumel": xnumel, "rnumel": rnumel}.get(p)
            if known is not None and known % 16:
                continue  # an int Triton does not specialise (a row of 50257, say)
        attrs[(i,)] = [["tt.divisibility", 16]]
    warps = (4 if xblock * rblock >= 1024 else 2) if finish else cfg.num_warps
    return ASTSource(jit, sig, consts, attrs), warps


def _loops(sass: str, show: bool = False) -> list[dict[str, int]]:
    """Each loop of a SASS listing (a branch back to an earlier address, up to it), in order:
    its instructions, and how many are MUFU, global loads and global stores (``show``: each
    loop's instructions printed too)."""
    rows = [(int(m[1], 16), m[2]) for m in re.finditer(r"/\*([0-9a-f]{4,6})\*/\s*([^;]*);", sass)]
    out = []
    for addr, text in rows:
        target = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if target and int(target[1], 16) < addr:
            start = int(target[1], 16)
            ops = [
                re.sub(r"^@!?U?P\w+\s+", "", t).split()[0] for a, t in rows if start <= a <= addr
            ]
            if show:
                print(f"--- loop {start:#06x}..{addr:#06x}")
                print("\n".join(t for a, t in rows if start <= a <= addr))
            out.append(
                {"instructions": len(ops)}
                | {k: sum(o.startswith(k) for o in ops) for k in ("MUFU", "LDG", "STG")}
            )
    return out


def _resources(compiled, per_thread: int, show_sass: bool = False) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(compiled.asm["cubin"])
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        out = subprocess.run(
            [str(tool), "-res-usage", str(path)], capture_output=True, text=True
        ).stdout
        sass = subprocess.run(
            [str(tool), "-sass", str(path)], capture_output=True, text=True
        ).stdout
    regs = re.search(r"REG:(\d+)", out)
    local = re.search(r"LOCAL:(\d+)", out)
    loads = sorted(set(re.findall(r"ld\.global[.a-zA-Z0-9_:]*", compiled.asm["ptx"])))
    stores = re.findall(r"st\.global[.a-zA-Z0-9_:]*", compiled.asm["ptx"])
    kinds = {k: stores.count(k) for k in sorted(set(stores))}
    loops = [lp for lp in _loops(sass, show_sass) if lp["LDG"] or lp["STG"]]
    if loops:
        # ptxas may unroll a loop: one holding k times the fewest loads of any loop is taken
        # as k iterations (the float32 online softmax's loop, unrolled 4 times, read 32.2
        # instructions a value where it is 8.1)
        fewest = min((lp["LDG"] for lp in loops if lp["LDG"]), default=0)

        def unrolled(lp: dict[str, int]) -> int:
            return max(1, lp["LDG"] // fewest) if fewest and lp["LDG"] % fewest == 0 else 1

        mix = "loops " + "; ".join(
            f"{lp['instructions'] / per_thread / unrolled(lp):.1f}/value "
            f"({lp['MUFU'] / per_thread / unrolled(lp):.1f} MUFU)"
            + (f" x{unrolled(lp)} unrolled" if unrolled(lp) > 1 else "")
            for lp in loops
        )
        # what runs once a program (the setup and the epilogue: a looped reduction's combine of
        # its lanes), in iterations of its longest loop: a program of few iterations pays it
        # in full (static counts; the epilogue's own branches are counted once)
        total = len(re.findall(r"/\*[0-9a-f]{4,6}\*/\s*[A-Z@]", sass))
        inside = sum(lp["instructions"] for lp in _loops(sass))
        longest = max(lp["instructions"] / unrolled(lp) for lp in loops)
        mix += f"; outside loops {total - inside} ({(total - inside) / longest:.1f} iterations)"
    else:
        total = len(re.findall(r"/\*[0-9a-f]{4,6}\*/", sass))
        mix = f"no loop, {total / per_thread:.1f}/value"
    return (
        f"regs {regs[1] if regs else '?'} spill bytes {local[1] if local else '?'} "
        f"loads {' '.join(loads)}; stores {' '.join(f'{k} x{n}' for k, n in kinds.items())}; "
        f"{mix}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--widths", default="1000,4096,8192,16384")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--cases", default="", help="only cases whose name contains this")
    parser.add_argument("--no-online-softmax", action="store_true")
    parser.add_argument("--options", default="{}", help="more TritonOptions fields, as JSON")
    parser.add_argument("--depthwise", action="store_true", help="direct convolutions instead")
    parser.add_argument(
        "--strip",
        action="store_true",
        help="codegen-triton's strip kernel for depthwise convolutions instead (_depthwise.py)",
    )
    parser.add_argument("--print-source", action="store_true", help="each kernel's source too")
    parser.add_argument("--print-sass", action="store_true", help="each loop's SASS too")
    args = parser.parse_args()
    options = {"compile_workers": 0, "online_softmax": not args.no_online_softmax}
    backend = _RecordingBackend(TritonOptions(**(options | json.loads(args.options))))
    target = GPUTarget("cuda", 90, 32)
    if args.depthwise:
        for dtype_name in args.dtypes.split(","):
            _depthwise(getattr(torch, dtype_name), backend, target)
        return
    if args.strip:
        for dtype_name in args.dtypes.split(","):
            _strip(getattr(torch, dtype_name), target)
        return
    # split long reductions as on an H200 (132 SMs), which this machine cannot ask
    h200 = loop_ir.LoopIROptions(split_programs=PROGRAMS_PER_SM * 132)
    for dtype_name in args.dtypes.split(","):
        for width in map(int, args.widths.split(",")):
            with FakeTensorMode(allow_non_fake_inputs=True):
                cases = gpu_bandwidth.cases(getattr(torch, dtype_name), args.rows, width, "cuda")
                graphs = [
                    (
                        name,
                        make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs),
                        inputs,
                    )
                    for name, fn, inputs in cases
                    if any(c in name for c in args.cases.split(","))
                ]
            for name, gm, inputs in graphs:
                kernels = loop_ir.compile_graph(gm, list(inputs), backend, h200).kernels
                for spec, k in zip(backend.specs, kernels):
                    c = k.config
                    if args.print_source:
                        print(Path(k.path).read_text(), flush=True)
                    shape = (
                        f"{'[R,X]' if c.transposed else '[X,R]'} {c.xblock}x{c.rblock} "
                        f"{'looped' if c.looped else 'persistent'}"
                        if c.rblock > 1
                        else f"pointwise {c.xblock}"
                    )
                    fns = [_function(k, False)] + ([_function(k, True)] if c.split else [])
                    for finish, jit in zip((False, True), fns):
                        src, warps = _signature(jit, spec, k, finish)
                        try:
                            regs = {} if finish or not c.maxnreg else {"maxnreg": c.maxnreg}
                            compiled = triton.compile(
                                src, target=target, options={"num_warps": warps, **regs}
                            )
                            tile = (
                                finish_blocks(c.split, int(sympy.prod(spec.xranges)))
                                if finish
                                else (c.xblock, c.rblock)
                            )
                            res = _resources(
                                compiled,
                                max(1, tile[0] * tile[1] // (32 * warps)),
                                args.print_sass,
                            )
                        except Exception as e:  # noqa: BLE001 - report and go on
                            res = f"COMPILE FAILED {type(e).__name__}: {str(e)[:200]}"
                        print(
                            f"{dtype_name:9s} {width:6d} {name:24s} {jit.fn.__name__:14s} {shape} "
                            f"split {c.split} warps {warps}: {res}",
                            flush=True,
                        )


#: (N, C, H, W, kernel, stride) of depthwise convolutions the timm models run
DEPTHWISE = [
    (128, 64, 112, 112, 3, 2),  # MobileNetV3
    (128, 72, 56, 56, 3, 1),
    (128, 120, 28, 28, 5, 1),
    (128, 240, 28, 28, 5, 1),  # EfficientNet-B0: cuDNN was faster in session 16
    (128, 672, 14, 14, 5, 1),
    (64, 384, 14, 14, 7, 1),  # ConvNeXt-tiny: left to cuDNN by default
]


def _depthwise_fn(s: int, k: int, c: int):
    """``hardswish(conv + bias)``: a direct depthwise convolution of stride ``s``, kernel ``k``."""
    import torch.nn.functional as F

    conv, taps = torch.ops.torchkiln.conv_direct.default, torch.ops.torchkiln.conv_taps.default

    def fn(x, weight, bias):
        y = conv(x, taps(weight), [s, s], [k // 2, k // 2], [1, 1], c)
        return F.hardswish(y + bias.view(1, -1, 1, 1))

    return fn


def _depthwise(dtype, backend, target) -> None:
    """The sm_90 resources of each ``DEPTHWISE`` shape's direct convolution kernel."""
    for n, c, h, w, k, s in DEPTHWISE:
        fn = _depthwise_fn(s, k, c)

        with FakeTensorMode(allow_non_fake_inputs=True):
            x = torch.empty_strided(
                (n, c, h, w), (h * w * c, 1, w * c, c), device="cuda", dtype=dtype
            )  # channels-last (.contiguous(memory_format=...) needs a real CUDA here)
            inputs = (
                x,
                torch.randn(c, 1, k, k, device="cuda", dtype=dtype),
                torch.randn(c, device="cuda", dtype=dtype),
            )
            gm = make_fx(fn, decomposition_table=loop_ir.decompositions())(*inputs)
        never = loop_ir.LoopIROptions(channels_last="never")
        kernels = loop_ir.compile_graph(gm, list(inputs), backend, never).kernels
        for spec, kern in zip(backend.specs, kernels):
            src, warps = _signature(_function(kern, False), spec, kern, False)
            compiled = triton.compile(src, target=target, options={"num_warps": warps})
            per_thread = max(1, kern.config.xblock // (32 * warps))
            print(
                f"{str(dtype).split('.')[1]:9s} depthwise {k}x{k} stride {s} {c} channels "
                f"{h}x{w} batch {n}: XBLOCK {kern.config.xblock} warps {warps}: "
                + _resources(compiled, per_thread),
                flush=True,
            )


#: ConvNeXt-tiny's 7x7s at batch 64: (C, H = W)
CONVNEXT_7X7 = ((96, 56), (192, 28), (384, 14), (768, 7))


def _strip(dtype, target) -> None:
    """Compile seconds and sm_90 resources of codegen-triton's strip kernel (``_depthwise.py``)
    for ConvNeXt-tiny's 7x7s, at the configuration it picks, its kernel rows unrolled (as
    shipped) and as a loop. The launch specialises the ints as Triton does: C (a multiple of
    16 here) divisible by 16, the others as their values say."""
    import time

    from torchkiln_codegen_triton import _depthwise as D

    for c, size in CONVNEXT_7X7:
        block_r, block_c, warps, ws = D.launch_config(64, c, size, size, 132, dtype)
        nws = triton.cdiv(size, ws)
        ints = {"R": 64 * size * nws, "H": size, "W": size, "C": c, "OH": size, "OW": size}
        ints["NWS"] = nws
        for unrolled in (True, False):
            text = D.source(7, 7, 3, 3, ws, True, unroll_rows=unrolled)
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "strip.py"
                path.write_text(text)
                spec = importlib.util.spec_from_file_location(f"tk_strip_{unrolled}", path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
                jit = module.conv_depthwise
                sig, consts, attrs = {}, {}, {}
                for i, p in enumerate(jit.arg_names):
                    if p.endswith("_ptr"):
                        sig[p] = "*" + _TYPES[dtype]
                        attrs[(i,)] = [["tt.divisibility", 16]]
                    elif p in ("BLOCK_R", "BLOCK_C"):
                        sig[p] = "constexpr"
                        consts[p] = block_r if p == "BLOCK_R" else block_c
                    else:
                        sig[p] = "i32"
                        if ints[p] % 16 == 0:
                            attrs[(i,)] = [["tt.divisibility", 16]]
                start = time.perf_counter()
                compiled = triton.compile(
                    ASTSource(jit, sig, consts, attrs), target=target, options={"num_warps": warps}
                )
                seconds = time.perf_counter() - start
            per_thread = max(1, block_r * block_c // (32 * warps))
            print(
                f"{str(dtype).split('.')[1]:9s} strip 7x7 {c} channels {size}x{size} batch 64 "
                f"[{block_r}, {block_c}, {warps}, {ws}] rows {'unrolled' if unrolled else 'a loop'}: "
                f"compiled in {seconds:.1f} s, shared memory {compiled.metadata.shared} B; "
                + _resources(compiled, per_thread),
                flush=True,
            )


def _function(kernel, finish: bool):
    """The @triton.jit function of ``kernel`` (or its split reduction's finish)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"tk_res_{abs(hash(kernel.path))}", kernel.path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Triton looks the function's globals up through its module
    spec.loader.exec_module(module)
    return getattr(module, kernel.function_name + ("_finish" if finish else ""))


if __name__ == "__main__":
    main()
