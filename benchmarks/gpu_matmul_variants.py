"""How fast can a Triton matmul with a pointwise epilogue run on this GPU, against cuBLAS's
product followed by the epilogue's kernel? The kernel forms codegen-triton's matmul template
could take, each with the exact GELU epilogue stored through pointers (as the template's
epilogue stores, masked by ``xmask``), on the linear layers of the full-size suites:

- ``plain``: the template's form (pointer loads, ``tl.dot`` over K, a program a tile);
- ``tma``: the operands loaded through tensor descriptors (the bulk tensor copy engine), a
  program a tile;
- ``tma-persistent``: tensor descriptors, a program an SM walking the tiles.

    python3 benchmarks/gpu_matmul_variants.py [--shapes 8192x768x3072,...]

Times are ``triton.testing.do_bench`` medians (us); TFLOP/s of the product alone. Session 43
(an H100, ``benchmarks/results/gpu-2026-12-07-session43/call1``): no form reached two thirds
of cuBLAS's product at these sizes (BERT's: 105.6 us at best against 61.3); the persistent
form with tensor descriptors was at most 5% faster than the plain one. (That run's
``plain`` kernel read past K where BLOCK_K does not divide it: its ConvNeXt first-stage error
of 0.49; masked since. The two descriptor forms share their tile's code, ``_tma_tile``, since
that run: checked against the reference under Triton's interpreter, not rerun on the GPU.)
"""

from __future__ import annotations

import argparse
import faulthandler
import functools
import itertools
import math

import torch
import triton
import triton.language as tl

#: (name, M, K, N): BERT's intermediate (16 x 512), ViT-base's fc1 (64 x 197), DistilBERT's
#: (32 x 512), Llama's gate (8 x 1024), BERT's output product, BERT at batch 1, ConvNeXt-tiny's
#: fc1 at each stage (batch 64)
SHAPES = [
    ("bert", 8192, 768, 3072),
    ("vit", 12608, 768, 3072),
    ("distilbert", 16384, 768, 3072),
    ("llama-gate", 8192, 1024, 2816),
    ("bert-out", 8192, 3072, 768),
    ("bert-b1", 512, 768, 3072),
    ("convnext-s1", 200704, 96, 384),
    ("convnext-s2", 50176, 192, 768),
    ("convnext-s3", 12544, 384, 1536),
    ("convnext-s4", 3136, 768, 3072),
]


@triton.jit
def _tile_of(tile, tiles_m, tiles_n, GM: tl.constexpr):
    group = tile // (GM * tiles_n)
    first_m = group * GM
    rows = tl.minimum(tiles_m - first_m, GM)
    return first_m + (tile % rows), (tile % (GM * tiles_n)) // rows


@triton.jit
def _gelu_store(acc, c_ptr, rm, rn, M, N, BIAS: tl.constexpr, bias_ptr):
    if BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0).to(tl.float32)[None, :]
    acc = acc.to(tl.bfloat16).to(tl.float32)
    out = 0.5 * acc * (1 + tl.math.erf(acc * 0.7071067811865476))
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], out.to(tl.bfloat16), mask=mask)


@triton.jit
def mm_plain(a_ptr, w_ptr, c_ptr, bias_ptr, M, N, K,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
             BIAS: tl.constexpr):  # fmt: skip
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    pid_m, pid_n = _tile_of(tl.program_id(0), tiles_m, tiles_n, GM)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    am = tl.max_contiguous(tl.multiple_of(rm % M, BM), BM)
    bn = tl.max_contiguous(tl.multiple_of(rn % N, BN), BN)
    a_ptrs = a_ptr + am[:, None] * K + rk[None, :]
    b_ptrs = w_ptr + rk[:, None] + bn[None, :] * K
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k, other=0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k, other=0)
        acc += tl.dot(a, b)
        a_ptrs += BK
        b_ptrs += BK
    _gelu_store(acc, c_ptr, rm, rn, M, N, BIAS, bias_ptr)


@triton.jit
def _tma_tile(a_desc, w_desc, tile, c_ptr, bias_ptr, M, N, K,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
              BIAS: tl.constexpr):  # fmt: skip
    pid_m, pid_n = _tile_of(tile, tl.cdiv(M, BM), tl.cdiv(N, BN), GM)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k in range(0, K, BK):
        a = a_desc.load([pid_m * BM, k])
        w = w_desc.load([pid_n * BN, k])
        acc = tl.dot(a, w.T, acc)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    _gelu_store(acc, c_ptr, rm, rn, M, N, BIAS, bias_ptr)


@triton.jit
def mm_tma(a_ptr, w_ptr, c_ptr, bias_ptr, M, N, K,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
           BIAS: tl.constexpr):  # fmt: skip
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    _tma_tile(a_desc, w_desc, tl.program_id(0), c_ptr, bias_ptr, M, N, K, BM, BN, BK, GM, BIAS)


@triton.jit
def mm_tma_persistent(a_ptr, w_ptr, c_ptr, bias_ptr, M, N, K,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
                      BIAS: tl.constexpr, PROGRAMS: tl.constexpr):  # fmt: skip
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS):
        _tma_tile(a_desc, w_desc, tile, c_ptr, bias_ptr, M, N, K, BM, BN, BK, GM, BIAS)


#: (kernel, BM, BN, BK, warps, stages)
TILES = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 4)]
FORMS = {"plain": mm_plain, "tma": mm_tma, "tma-persistent": mm_tma_persistent}


def _alloc(size: int, alignment: int, stream) -> torch.Tensor:
    return torch.empty(size, device="cuda", dtype=torch.int8)


def bench_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default=",".join(s[0] for s in SHAPES))
    parser.add_argument("--hang-s", type=float, default=400)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.hang_s, exit=True)
    triton.set_allocator(_alloc)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    wanted = set(args.shapes.split(","))
    for name, m, k, n in SHAPES:
        if name in wanted:
            _shape(name, m, k, n, sms)


def _shape(name: str, m: int, k: int, n: int, sms: int) -> None:
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.gelu(torch.addmm(bias.float(), a.float(), w.float().t()))
    flop = 2 * m * n * k
    mm_us = bench_us(lambda: torch.mm(a, w.t()))
    pair_us = bench_us(lambda: torch.nn.functional.gelu(torch.addmm(bias, a, w.t())))
    print(
        f"{name} {m}x{k}x{n}: cuBLAS mm {mm_us:.1f} us ({flop / mm_us / 1e6:.0f} TFLOP/s), "
        f"addmm + gelu {pair_us:.1f} us",
        flush=True,
    )
    for (form, kernel), (bm, bn, bk, warps, stages) in itertools.product(FORMS.items(), TILES):
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        extra = {}
        grid = (tiles,)
        if form == "tma-persistent":
            grid = (min(sms, tiles),)
            extra["PROGRAMS"] = grid[0]
        run = functools.partial(
            kernel[grid], a, w, c, bias, m, n, k, BM=bm, BN=bn, BK=bk, GM=8, BIAS=True,
            num_warps=warps, num_stages=stages, **extra,
        )  # fmt: skip
        label = f"  {form:15s} {bm}x{bn}x{bk} {warps}w {stages}s"
        try:
            run()
            torch.cuda.synchronize()
            err = (c.float() - ref).abs().max().item() / ref.abs().max().item()
            us = bench_us(run)
        except Exception as e:  # noqa: BLE001 - a form this triton or GPU lacks
            print(f"{label}: failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        print(
            f"{label}: {us:.1f} us ({flop / us / 1e6:.0f} TFLOP/s), "
            f"{us / pair_us:.3f} of the pair, {us / mm_us:.3f} of cuBLAS's mm, err {err:.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
