"""The reduction heuristic (``autotune.reduction_config``): persistent vs looped by row length and
value size, rows per program, warps, outer-reduction tiles; and what the choice does to the
generated kernel (a persistent softmax reads x once, a persistent Welford divides once per row).
The kernels run against eager in test_wide_rows.py."""

import re

import pytest
import torch
from _specs import buf, compile_one, compiled_for_gpu, spec
from torchkiln_codegen_triton import TritonOptions
from torchkiln_codegen_triton.autotune import (
    MIN_PROGRAMS,
    TILE,
    heuristic_config,
    reduction_config,
    value_itemsize,
)
from torchkiln_loop_ir.ops import ops

OPTS = TritonOptions()
F32, BF16 = torch.float32, torch.bfloat16


@pytest.mark.parametrize(
    "rnumel,rblock,warps",
    [
        (1000, 1024, 8),
        (4096, 4096, 8),
        (4095, 4096, 8),
        (4097, 8192, 16),
        (5000, 8192, 16),
        (8192, 8192, 16),
    ],
)
def test_rows_up_to_8192_are_persistent_one_row_per_program(rnumel, rblock, warps):
    cfg = reduction_config(32768, rnumel, 4, OPTS)
    assert not cfg.looped and cfg.rblock == rblock and cfg.num_warps == warps
    assert cfg.xblock * cfg.rblock == max(TILE, rblock)  # a row of 1000: 4 rows per program
    assert cfg.reason.startswith("persistent") and str(rnumel) in cfg.reason


def test_wider_rows_loop_one_row_per_program():
    cfg = reduction_config(32768, 8193, 4, OPTS)
    assert cfg.looped and (cfg.xblock, cfg.rblock, cfg.num_warps) == (1, 2048, 8)
    assert cfg.reason.startswith("looped") and "8193" in cfg.reason


def test_eight_byte_values_persist_up_to_half_the_length():
    assert not reduction_config(32768, 4096, 8, OPTS).looped
    cfg = reduction_config(32768, 8192, 8, OPTS)
    assert cfg.looped and "4096 8-byte" in cfg.reason
    # 16-bit values are held as float32: the same limit as float32
    assert reduction_config(32768, 8192, 2, OPTS) == reduction_config(32768, 8192, 4, OPTS)


def test_narrow_rows_share_a_program_until_the_grid_is_short():
    cfg = reduction_config(32768, 64, 4, OPTS)
    assert (cfg.xblock, cfg.rblock, cfg.num_warps) == (64, 64, 8) and not cfg.looped
    assert reduction_config(1 << 20, 2, 4, OPTS).xblock == 256  # at most 256 rows
    # 1000 rows of 64: 64 per program would be 16 programs; halved until >= MIN_PROGRAMS or 1
    small = reduction_config(1000, 64, 4, OPTS)
    assert small.xblock == 2 and -(-1000 // small.xblock) >= MIN_PROGRAMS
    lone = reduction_config(100, 1024, 4, OPTS)
    assert (lone.xblock, lone.num_warps) == (1, 4)
    assert reduction_config(7, 3, 4, OPTS).xblock == 1


def test_unknown_row_length_loops_in_short_blocks():
    cfg = reduction_config(None, None, 4, OPTS)
    assert cfg.looped and (cfg.xblock, cfg.rblock, cfg.num_warps) == (16, 128, 4)
    assert "not known" in cfg.reason
    assert reduction_config(1000, None, 4, OPTS).looped


def test_options_bound_the_choice():
    forced = TritonOptions(persistent_rnumel=16, looped_rblock=16)
    cfg = reduction_config(7, 33, 4, forced)
    assert cfg.looped and cfg.rblock == 16
    assert not reduction_config(7, 16, 4, forced).looped


def test_outer_reductions_keep_x_along_contiguous_memory():
    cfg = reduction_config(4096, 32768, 2, OPTS, transposed=True)
    assert cfg.transposed and cfg.looped and (cfg.xblock, cfg.rblock, cfg.num_warps) == (64, 64, 16)
    short = reduction_config(4096, 64, 2, OPTS, transposed=True)
    assert short.transposed and not short.looped and short.rblock == 64
    # a column of 4096 does not fit beside 32 columns: looped, whatever the persistent limit
    assert reduction_config(4096, 4096, 2, OPTS, transposed=True).looped
    assert reduction_config(3, 1000, 4, OPTS, transposed=True).xblock == 4


def test_few_columns_take_a_narrower_block_when_asked():
    """``transposed_min_programs``: 256 columns (a batch norm's channels) of 128 partial rows
    give 4 programs at XBLOCK 64 (0: off); asking for 16 (the default) halves XBLOCK to 16
    (not below), and the column of 128 then fits persistent. Many columns keep 64."""
    off = TritonOptions(transposed_min_programs=0)
    assert reduction_config(256, 128, 4, off, transposed=True).xblock == 64
    few = TritonOptions()
    assert few.transposed_min_programs == 16
    cfg = reduction_config(256, 128, 4, few, transposed=True)
    assert (cfg.xblock, cfg.rblock, cfg.looped) == (16, 128, False) and "16 programs" in cfg.reason
    assert (
        reduction_config(
            256, 128, 4, TritonOptions(transposed_min_programs=1024), transposed=True
        ).xblock
        == 16
    )
    assert reduction_config(4096, 32768, 2, few, transposed=True).xblock == 64


def _row_softmax(n, m, dtype):
    """out[i, :] = softmax(a[i, :]) as loop-ir schedules it: max, sum of exp, normalize."""

    def s1(x, r):
        v = ops.to_dtype(ops.load("a", x[0] * m + r[0]), F32, dtype)
        ops.store_reduction("mx", x[0], ops.reduction(F32, F32, "max", v))

    def s2(x, r):
        v = ops.to_dtype(ops.load("a", x[0] * m + r[0]), F32, dtype)
        e = ops.exp(ops.sub(v, ops.load("mx", x[0])))
        ops.store_reduction("sm", x[0], ops.reduction(F32, F32, "sum", e))

    def s3(x, r):
        v = ops.to_dtype(ops.load("a", x[0] * m + r[0]), F32, dtype)
        e = ops.exp(ops.sub(v, ops.load("mx", x[0])))
        ops.store(
            "out", x[0] * m + r[0], ops.to_dtype(ops.truediv(e, ops.load("sm", x[0])), dtype, F32)
        )

    return spec(
        "softmax",
        (n,),
        (m,),
        [
            ("loop", [("mx", s1, True)]),
            ("loop", [("sm", s2, True)]),
            ("loop", [("out", s3, False)]),
        ],
        [
            buf("a", dtype, (n, m)),
            buf("out", dtype, (n, m)),
            buf("mx", F32, (n,)),
            buf("sm", F32, (n,)),
        ],
        ["a"],
        ["out"],
        {"mx", "sm"},
    )


def test_persistent_softmax_reads_its_row_once():
    n, m = 5, 4096
    k = compile_one(_row_softmax(n, m, BF16))
    assert not k.config.looped and "for roffset" not in k.source
    assert k.source.count("tl.load(in_ptr0") == 1 and "# persistent: a row of 4096" in k.source
    a = torch.randn(n, m, dtype=BF16) * 3
    out = torch.empty(n, m, dtype=BF16)
    k(a, out)
    torch.testing.assert_close(out, a.float().softmax(1).to(BF16), atol=2e-3, rtol=1e-2)
    # past the limit: a pass per stage, the max and sum of exp sharing one (online softmax)
    looped = compile_one(_row_softmax(n, 8200, BF16))
    assert looped.config.looped and _row_reads(looped.source) == 2
    plain = compile_one(_row_softmax(n, 8200, BF16), TritonOptions(online_softmax=False))
    assert plain.config.looped and _row_reads(plain.source) == 3


def _row_reads(source: str) -> int:
    """Passes over the row of ``in_ptr0``: one load site per r-loop, or per aligned walk (three
    loops with the same body: rows of 8200 bfloat16 are a multiple of 8 but not of 16)."""
    sites = source.count("tl.load(in_ptr0")
    return sites // 3 if "aligned walk" in source else sites


def _row_var(n, m):
    def body(x, r):
        v = ops.load("a", x[0] * m + r[0])
        mean, m2, _ = ops.reduction(F32, F32, "welford_reduce", v)
        ops.store_reduction("mean", x[0], mean)
        ops.store_reduction("m2", x[0], m2)

    return spec(
        "var",
        (n,),
        (m,),
        [("loop", [("mean", body, True), ("m2", body, True)])],
        [buf("a", F32, (n, m)), buf("mean", F32, (n,)), buf("m2", F32, (n,))],
        ["a"],
        ["mean", "m2"],
    )


@pytest.mark.parametrize("m", [4096, 5000])
def test_persistent_welford_is_two_passes_on_registers(m):
    """mean, then the squared deviations from it: no running update, no divide per value (the
    weight is rnumel), and exact where a running mean drifts (rows of 1000 + noise)."""
    n = 3
    k = compile_one(_row_var(n, m))
    assert not k.config.looped and "+ rnumel" in k.source
    assert "tl.maximum(_wn" not in k.source and "/ tl.maximum" not in k.source
    a = torch.randn(n, m) + 1000
    mean, m2 = torch.empty(n), torch.empty(n)
    k(a, mean, m2)
    ref = a.double()
    torch.testing.assert_close(mean, ref.mean(1).float())
    torch.testing.assert_close(m2, (ref.var(1, correction=0) * m).float(), rtol=1e-4, atol=1e-3)


def test_heuristic_reads_sizes_off_the_spec():
    assert value_itemsize(_row_softmax(4, 8192, BF16)) == 4
    wide = _row_softmax(4, 8192, torch.float64)
    assert value_itemsize(wide) == 8 and heuristic_config(wide, OPTS).looped
    assert not heuristic_config(_row_softmax(4, 8192, F32), OPTS).looped


def test_looped_rows_on_a_vector_boundary_take_twice_the_block():
    """Rows of 16384 bfloat16 (32 KB, every block a vector load): RBLOCK 4096 at 8 values per
    thread, 16 warps; a row max over rows of 50257 (the aligned walk, read once) keeps 2048 at
    8 warps; ``looped_vector_scale=1`` turns the rule off."""
    aligned = heuristic_config(_row_softmax(4096, 16384, BF16), OPTS)
    assert aligned.looped and (aligned.rblock, aligned.num_warps) == (4096, 16)
    assert "16-byte boundary" in aligned.reason and "8 values per thread" in aligned.reason
    walked = heuristic_config(_row_max(4096, 50257, "max"), OPTS)
    assert walked.looped and (walked.rblock, walked.num_warps) == (2048, 8)
    assert "boundary" not in walked.reason
    off = heuristic_config(_row_softmax(4096, 16384, BF16), TritonOptions(looped_vector_scale=1))
    assert (off.rblock, off.num_warps) == (2048, 8)


def test_long_vector_rows_read_twice_take_few_programs():
    """Vector rows of 32768 and 65536 bfloat16 that a softmax reads twice (its online max and
    sum, then its output) take RBLOCK 16384 at 32 warps, one row per program (float32 rows
    8192); a row max of 32768 (one read), rows of 16384 and ``reread_rnumel=0`` keep the rule
    above. Walked rows of 50257 (``_aligned.py``: every load a vector load, the first and last
    blocks' too) take the rule at half the block where that covers fewer positions past the
    row: 7 blocks of 8192 bfloat16 values (57344 positions) rather than 4 of 16384 (65536);
    ``aligned_rows=False`` keeps 2048. Each is capped at 32 registers a thread (two programs of
    32 warps a SM), except rows of more than 128 KB (float32 rows of 50257): one program a SM,
    uncapped, at twice the block up to 16 values a thread (RBLOCK 16384: 64 KB of float32 an
    iteration)."""
    for width in (32768, 65536):
        cfg = heuristic_config(_row_softmax(4096, width, BF16), OPTS)
        assert (cfg.xblock, cfg.rblock, cfg.num_warps) == (1, 16384, 32), cfg
        assert cfg.looped and "two r-loops" in cfg.reason
    # the same 32 KB per iteration for float32 rows: 8192 values (16384 ran at 75%, 8192 at 88%)
    wide = heuristic_config(_row_softmax(4096, 32768, F32), OPTS)
    assert (wide.xblock, wide.rblock, wide.num_warps) == (1, 8192, 32), wide
    once = heuristic_config(_row_max(4096, 32768, "max"), OPTS)
    assert (once.rblock, once.num_warps) == (4096, 16), once
    assert heuristic_config(_row_softmax(4096, 16384, BF16), OPTS).rblock == 4096
    walked = heuristic_config(_row_softmax(4096, 50257, BF16), OPTS)
    assert (walked.xblock, walked.rblock, walked.num_warps) == (1, 8192, 32), walked
    assert "walked" in walked.reason and "two r-loops" in walked.reason
    assert cfg.maxnreg == wide.maxnreg == walked.maxnreg == 32
    walked32 = heuristic_config(_row_softmax(4096, 50257, F32), OPTS)
    assert (walked32.rblock, walked32.num_warps, walked32.maxnreg) == (16384, 32, 0), walked32
    assert "one program a SM" in walked32.reason
    long16 = heuristic_config(_row_softmax(64, 131072, BF16), OPTS)  # 256 KB rows
    assert (long16.rblock, long16.num_warps, long16.maxnreg) == (16384, 32, 0), long16
    plain = TritonOptions(aligned_rows=False)
    assert heuristic_config(_row_softmax(4096, 50257, BF16), plain).rblock == 2048
    off = heuristic_config(_row_softmax(4096, 32768, BF16), TritonOptions(reread_rnumel=0))
    assert (off.rblock, off.num_warps) == (4096, 16)


def test_a_row_read_by_two_loops_is_kept_in_l2_then_let_go():
    """The looped softmax reads ``a`` in its online max/sum loop and again to write: the first
    read is evict_last, the second evict_first; a persistent one (one read) has no hint, nor
    does ``eviction_hints=False``."""
    looped = compile_one(_row_softmax(64, 32768, BF16), OPTS).source
    first, last = looped.index('eviction_policy="evict_last"'), looped.index('"evict_first"')
    assert first < last and looped.count("eviction_policy") == 2
    persistent = compile_one(_row_softmax(64, 4096, BF16), OPTS).source
    assert "eviction_policy" not in persistent
    plain = compile_one(_row_softmax(64, 32768, BF16), TritonOptions(eviction_hints=False))
    assert "eviction_policy" not in plain.source


def test_the_output_of_a_row_read_twice_can_leave_l2_first():
    """``reread_stores_evict_first``: the output loop's store is evict_first too (the first
    loop stores nothing); off by default, and without the eviction hints. The kernel still
    computes eager's softmax (rows of 1025 looped in blocks of 256, 3 rows)."""
    src = compile_one(
        _row_softmax(64, 32768, BF16), TritonOptions(reread_stores_evict_first=True)
    ).source
    stores = re.findall(r"tl\.store\(.*", src)
    hinted = [ln for ln in stores if ln.endswith('eviction_policy="evict_first")')]
    assert stores and hinted == stores, stores
    default = compile_one(_row_softmax(64, 32768, BF16), OPTS).source
    assert not any("eviction_policy" in ln for ln in re.findall(r"tl\.store\(.*", default))
    off = TritonOptions(reread_stores_evict_first=True, eviction_hints=False)
    assert "eviction_policy" not in compile_one(_row_softmax(64, 32768, BF16), off).source
    small = TritonOptions(
        reread_stores_evict_first=True,
        persistent_rnumel=256,
        looped_rblock=256,
        aligned_rows=False,
    )
    k = compile_one(_row_softmax(3, 1025, F32), small)
    assert k.config.looped and re.search(r"tl\.store\(.*evict_first", k.source)
    for _ in range(2):
        a, out = torch.randn(3, 1025), torch.empty(3, 1025)
        k(a, out)
        torch.testing.assert_close(out, torch.softmax(a, -1))


def _row_max(n, m, rtype):
    def body(x, r):
        v = ops.load("a", x[0] * m + r[0])
        ops.store_reduction("out", x[0], ops.reduction(F32, F32, rtype, v))

    return spec(
        f"row_{rtype}",
        (n,),
        (m,),
        [("loop", [("out", body, True)])],
        [buf("a", F32, (n, m)), buf("out", F32, (n,))],
        ["a"],
        ["out"],
    )


@pytest.mark.parametrize(
    "options",
    [
        None,
        TritonOptions(persistent_rnumel=16, looped_rblock=16),
        TritonOptions(persistent_rnumel=16, looped_rblock=16, split_min_rchunk=16),
    ],
    ids=["persistent", "looped", "split"],
)
@pytest.mark.parametrize("rtype", ["max", "min"])
def test_gpu_form_of_max_propagates_nan_in_one_reduction(monkeypatch, options, rtype):
    """The source a GPU gets (one tl.reduce of _tk_max_combine / _tk_min_combine, no separate
    NaN test), run here by the interpreter on short rows, where its lane-by-lane combine is
    quick; interpreter kernels take the builtin max plus a NaN test (test_reductions.py)."""
    import torchkiln_codegen_triton.backend as backend

    monkeypatch.setattr(backend, "interpreting", lambda: False)
    n, m = 6, 40
    k = compile_one(_row_max(n, m, rtype), options)
    assert "tl.reduce(_acc" in k.source and f"_tk_{rtype}_combine)" in k.source
    assert ".to(tl.int8)" not in k.source  # no NaN test over the lanes of its own
    assert (k.config.split >= 2) == (options is not None and options.split_min_rchunk == 16)
    a = torch.randn(n, m)
    a[1, 7] = a[4, 39] = float("nan")
    a[2, :] = float("-inf") if rtype == "max" else float("inf")
    out = torch.empty(n)
    k(a, out)
    ref = a.amax(1) if rtype == "max" else a.amin(1)
    torch.testing.assert_close(out, ref, equal_nan=True)


def _sm90_resources(k, kspec) -> dict:
    """Registers, spill bytes and global load kinds of kernel ``k`` compiled for sm_90 by
    Triton's own compiler (no GPU needed), with its launch's blocks and warps. Run in a process
    with TRITON_INTERPRET=0 (``_sm90_main``): under the interpreter @triton.jit compiles nothing."""
    import importlib.util
    import re
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import triton
    from torchkiln_codegen_triton._assemble import arg_names
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    mod_spec = importlib.util.spec_from_file_location(f"tk_sm90_{abs(hash(k.path))}", k.path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[mod_spec.name] = module
    mod_spec.loader.exec_module(module)
    jit = getattr(module, k.function_name)
    types = {F32: "fp32", BF16: "bf16"}
    ptrs = {p: "*" + types[kspec.buffers[n].dtype] for n, p in arg_names(kspec).items()}
    sig = {
        p: ptrs.get(p, "constexpr" if p in ("XBLOCK", "RBLOCK") else "i32") for p in jit.arg_names
    }
    consts = {"XBLOCK": k.config.xblock, "RBLOCK": k.config.rblock}
    attrs = {
        (i,): [["tt.divisibility", 16]] for i, p in enumerate(jit.arg_names) if p not in consts
    }
    compiled = triton.compile(
        ASTSource(jit, sig, consts, attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": k.config.num_warps},
    )
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "k.cubin").write_bytes(compiled.asm["cubin"])
        usage, sass = (
            subprocess.run(
                [str(tool), flag, str(Path(d) / "k.cubin")],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for flag in ("-res-usage", "-sass")
        )
    return {
        "regs": int(re.search(r"REG:(\d+)", usage)[1]),
        "spilled": int(re.search(r"LOCAL:(\d+)", usage)[1]),
        "loads": sorted(set(re.findall(r"ld\.global[.a-z0-9]*", compiled.asm["ptx"]))),
        "config": [k.config.looped, k.config.rblock, k.config.num_warps],
        "loops": _sass_loops(sass),
    }


def _sass_loops(sass: str) -> list[dict]:
    """Each loop of a SASS listing (a branch back to an earlier address, up to it), in order:
    its instruction count and how many of those are MUFU (exp2, reciprocal), FMNMX and global
    loads."""
    import re

    rows = [(int(m[1], 16), m[2]) for m in re.finditer(r"/\*([0-9a-f]{4})\*/\s*([^;]*);", sass)]
    loops = []
    for addr, text in rows:
        target = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if target and int(target[1], 16) < addr:
            ops = [
                re.sub(r"^@!?U?P\w+\s+", "", t).split()[0]
                for a, t in rows
                if int(target[1], 16) <= a <= addr
            ]
            loops.append(
                {
                    "instructions": len(ops),
                    **{k: sum(o.startswith(k) for o in ops) for k in ("MUFU", "FMNMX", "LDG")},
                }
            )
    return loops


def _sm90_main() -> None:
    """Print the sm_90 resources of the widest persistent rows, one JSON object a line."""
    import json

    for name, kspec in [
        ("softmax_f32", _row_softmax(32768, 8192, F32)),
        ("softmax_bf16", _row_softmax(32768, 8192, BF16)),
        ("var_f32", _row_var(32768, 8192)),
        ("softmax_bf16_looped", _row_softmax(4096, 50257, BF16)),
        ("var_f32_looped", _row_var(4096, 16384)),
    ]:
        print(json.dumps({"name": name, **_sm90_resources(compile_one(kspec), kspec)}))


def test_widest_persistent_rows_compile_for_sm90_without_spills(tmp_path):
    """The heuristic's widest persistent rows (8192, 16 warps: softmax, Welford) as a GPU
    compiles them: registers well under the 255 limit, no spill to local memory, 16-byte vector
    loads. Compiled by Triton for sm_90 in a process of its own (no GPU needed)."""
    from pathlib import Path

    import triton

    pytest.importorskip("triton.backends.nvidia")
    if not (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump").exists():
        pytest.skip("Triton's NVIDIA tools are not installed")
    rows = compiled_for_gpu("import test_reduction_config as t; t._sm90_main()", tmp_path)
    assert len(rows) == 5, rows
    for row in rows[:3]:
        assert row["config"] == [False, 8192, 16], row
        assert row["regs"] <= 96 and row["spilled"] == 0, row
        assert "ld.global.v4.b32" in row["loads"], row
    # the looped softmax over a vocabulary (online, _online.py): the max and sum of exp share
    # one loop; its values (8 a thread, one group of online_group 8) each take one exp (MUFU)
    # and one FMNMX (the group's max, NaN-propagating), plus one exp (the rescale) and one FMNMX
    # (the running max) per group: about 9 instructions a value, where the per-value form took
    # 12 (and 23 with two exps and a four-instruction max); then the output loop
    looped = rows[3]
    assert looped["config"][0] and looped["spilled"] == 0, looped
    loads = [loop for loop in looped["loops"] if loop["LDG"]]
    per_thread = looped["config"][1] // (32 * looped["config"][2])
    groups = per_thread // 8
    # the online pass's loop over the row's interior (unmasked: the fewest instructions)
    online = min(loads[: len(loads) // 2], key=lambda loop: loop["instructions"])
    assert online["MUFU"] == per_thread + groups and online["FMNMX"] == per_thread, looped
    assert online["instructions"] <= 10 * per_thread, looped
    # a looped float32 Welford: one reciprocal per iteration, not a divide per value (18
    # instructions per value with its range fix-ups; about 9 now)
    welford = rows[4]
    assert welford["config"][0] and welford["spilled"] == 0, welford
    per_thread = welford["config"][1] // (32 * welford["config"][2])
    (loop,) = [loop for loop in welford["loops"] if loop["LDG"]]
    assert loop["MUFU"] <= 1 and loop["instructions"] <= 12 * per_thread, welford


def _add(n, dtype, out_dtype=None):
    """out = a + b over n values: one pointwise stage."""

    def body(x):
        ops.store("out", x[0], ops.add(ops.load("a", x[0]), ops.load("b", x[0])))

    return spec(
        "add",
        (n,),
        (),
        [("pointwise", [("out", body, False)])],
        [buf("a", dtype, [n]), buf("b", dtype, [n]), buf("out", out_dtype or dtype, [n])],
        ["a", "b"],
        ["out"],
    )


def test_pointwise_threads_move_32_bytes_of_the_narrowest_value():
    """XBLOCK 1024 (4 warps, 8 values per thread) for float32, 2048 for bfloat16 (16 values:
    two 16-byte loads per thread), 512 for float64; a short tensor takes its own size."""
    assert heuristic_config(_add(1 << 24, F32), OPTS).xblock == 1024
    assert heuristic_config(_add(1 << 24, BF16), OPTS).xblock == 2048
    assert heuristic_config(_add(1 << 24, BF16, F32), OPTS).xblock == 2048
    assert heuristic_config(_add(1 << 24, torch.float64), OPTS).xblock == 512
    assert heuristic_config(_add(100, BF16), OPTS).xblock == 128
    cfg = heuristic_config(_add(1 << 24, BF16), OPTS)
    assert cfg.num_warps == 4 and not cfg.looped


def _column_dot(rows, cols, inputs):
    """out[j] = sum_i prod_k in_k[i, j]: an outer reduction reading ``inputs`` full-size inputs
    and one per-column value (``m``) that does not count."""
    names = [f"in{k}" for k in range(inputs)]

    def body(x, r):
        v = ops.load("m", x[0])
        for n in names:
            v = ops.mul(v, ops.load(n, r[0] * cols + x[0]))
        ops.store_reduction("out", x[0], ops.reduction(F32, F32, "sum", v))

    return spec(
        "coldot",
        (cols,),
        (rows,),
        [("loop", [("out", body, True)])],
        [
            *(buf(n, BF16, [rows, cols]) for n in names),
            buf("m", F32, [cols]),
            buf("out", F32, [cols]),
        ],
        [*names, "m"],
        ["out"],
    )


def test_outer_reductions_take_fewer_warps_per_input_read_in_full():
    """8 values per thread for each input read in full, twice that again for two or more: a
    column sum takes 16 warps (93% of the H200's bandwidth, 74% with 8), the two-input sums of a
    batch norm's backward 4 (over channels-last images 84% against 79% with 8, and 59% with
    16); a per-column statistic read again does not count."""
    from torchkiln_codegen_triton.autotune import full_size_inputs

    one, two = _column_dot(32768, 256, 1), _column_dot(32768, 256, 2)
    assert full_size_inputs(one) == 1 and full_size_inputs(two) == 2
    wide = TritonOptions(transposed_min_programs=0)  # 256 columns: XBLOCK 64 kept, not narrowed
    cfg1, cfg2 = heuristic_config(one, wide), heuristic_config(two, wide)
    assert cfg1.transposed and cfg1.looped and (cfg1.xblock, cfg1.rblock) == (64, 64)
    assert (cfg1.num_warps, cfg2.num_warps) == (16, 4)
    assert "2 input(s) read in full" in cfg2.reason


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("streams", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("per_thread", [3, 6, 8, 12])
def test_every_warp_count_is_a_power_of_two(transposed, streams, per_thread):
    """Triton launches only power-of-two warp counts. Three inputs read in full (on the H200,
    the second kernel of the split NHWC batch-norm statistics, which combines partial means,
    sums of squares and counts) gave 8 x 3 = 24 values per thread, 4096 / (32 x 24) = 5
    warps, and the kernel failed to launch: the graph ran eagerly."""
    options = TritonOptions(
        looped_values_per_thread=per_thread, transposed_values_per_thread=per_thread
    )
    for xnumel, rnumel in [(64, 200704), (256, 802816), (32768, 50257), (7, 3), (None, None)]:
        for itemsize in (2, 4, 8):
            cfg = reduction_config(
                xnumel, rnumel, itemsize, options, transposed=transposed, streams=streams
            )
            assert cfg.num_warps in (1, 2, 4, 8, 16, 32), cfg
