"""Options of the Triton backend (a frozen dataclass passed down; no module-level config)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TritonOptions:
    """How kernels are generated and launched.

    persistent_rnumel: a reduction whose row length (rounded up to a power of two) is at most
        this keeps the whole row in registers (RBLOCK >= rnumel, x read once, one pass per
        stage); longer rows loop over RBLOCK chunks. Counted in 4-byte values: kernels holding
        8-byte values (float64, int64) persist up to half of it (``autotune.reduction_config``).
    pointwise_xblock: XBLOCK of a pointwise kernel whose narrowest value in memory is 4 bytes;
        2-byte values take twice as many, 8-byte half (each thread moves the same 32 bytes).
    looped_rblock: RBLOCK of a looped inner reduction of known row length (one row per
        program); a row of unknown length loops over at most 128.
    looped_vector_scale: a looped row that starts on a 16-byte boundary with a length a
        multiple of 16 (every block's accesses are vectors) takes this many times
        ``looped_rblock`` at the same ``looped_values_per_thread`` (so this many times the
        warps): more of the row in flight per program. 1 turns it off.
    reread_rnumel: a looped row of at least this many values, on a 16-byte boundary (as for
        ``looped_vector_scale``), that the kernel reads in two r-loops (a softmax: its max and
        sum of exp, then its output) takes RBLOCK ``reread_rblock`` at 32 warps: a quarter of
        the programs resident that RBLOCK 4096 at 16 warps keeps, so the rows walked between a
        row's two reads fit in L2 and the second read finds it there. 0 turns it off.
    reread_rblock: that RBLOCK for 2-byte inputs (16384: 16 values per thread); 4-byte inputs
        take half (the same 32 KB of the row per iteration).
    looped_values_per_thread, transposed_values_per_thread: values of a looped (inner, or outer:
        transposed) reduction's block per thread, which set its ``num_warps`` (2 to 16).
    mixed_values_per_thread: values of a mixed-order kernel's block (``[XBLOCK, RBLOCK]``, the
        rows of an iteration, loop-ir's ``KernelSpec.row_programs``) per thread, which set its
        ``num_warps`` (2 to 16); ``mixed_rows``: the rows an iteration of its loop takes (a power
        of two; 0, the default, takes ``1024 / RBLOCK`` for rows of at most 128 values and 1
        for longer ones); ``mixed_stages``: how deep the loop is software-pipelined
        (``tl.range(num_stages=...)``: the next rows' loads in flight while a row is reduced),
        0 choosing 4 for one row an iteration of at most 2048 2-byte values, 3 for the other
        single rows and none for several rows an iteration, 1 none. Session 39 (H100, bf16, a
        layer norm backward over ConvNeXt-tiny's first-stage rows, 200704 of 96, GB/s): one
        row pipelined 781, 4 rows 1206, 8 / 16 / 32 rows 1721 / 1720 / 1729, 8 and 16 rows
        pipelined 1138 / 1132 (torch.compile 1320); rows of 192 and 384 (50176 and 12544 of
        them) moved within 10% between 1, 2, 4 and 8 rows. Measured on the H200 (session 23,
        bfloat16 / float32, % of the bandwidth): rows of 4096 69 / 80 at 1 stage, 84-85 / 90 at 3, bfloat16 82 at 4 (134
        registers a thread by Triton 3.9's count offline); rows of 768 (four an iteration
        before) 58 / 83, one an iteration at 3 stages 63 / 91, at 4 67 / 88; rows of 1024
        63 / 88, 72 / 87, 81 / 84. 2 stages lost everywhere.
    autotune: on CUDA, time a few block-size configurations on the first call of each kernel and
        keep the fastest, and time matmul templates against cuBLAS at compile time
        (``_template.choose``; without it the template is predicted from the sizes); ignored
        under TRITON_INTERPRET=1, where the heuristic is used.
    transposed_rblock: RBLOCK (at most) of a looped outer reduction (the transposed block
        layout, whose XBLOCK is ``transposed_xblock`` (64) wide along contiguous memory);
        ``transposed_tile``: the elements of its block an iteration (RBLOCK is at most the tile
        over XBLOCK; 4096). Session 27 on the H200 (bf16, with transposed_min_programs 16):
        XBLOCK 128, tile 8192, 32 values a thread took the channels-last batch-norm statistics
        from 46% to 62% of 4.3 TB/s but its backward's sums from 88 to 62 and a column sum from
        91 to 82; RBLOCK 16 at 4 values a thread gave 60 / 49 / 92: neither is a default.
    transposed_welford_xblock, transposed_welford_tile, transposed_welford_values_per_thread:
        the blocks of a looped outer reduction whose one reduction is a Welford over one input
        (a batch norm's statistics over channels-last images), where its XBLOCK gives at least
        ``transposed_welford_min_programs`` programs (``autotune._welford_outer_config``): 128
        columns, a tile of 8192, 64 values a thread (4 warps); xblock 0 turns them off. Chosen
        from four launch sweeps of ResNet-50's layer1 statistics (the H200 in sessions 18 and
        27, an H100 in session 32): these blocks ranked 1st to 5th of 95 each time (bf16 about
        46 us on the H200, 49 on the H100), the common ones 29th to 36th (about 55). 0.9.16's
        32 values a thread (8 warps; off in 0.9.17) lost on the H100: 1575 GB/s against 1747.
        Timed on the H100 (session 32): bf16 1742 -> 2084 GB/s, fp32 2371 -> 2602.
    transposed_min_programs: an outer reduction over so few columns that XBLOCK 64 gives fewer
        programs than this takes a narrower XBLOCK (halved, down to 16: 32 bytes of 2-byte
        values, a memory sector) until it gives that many: a batch norm's statistics combined
        from 128 partial rows of 256 channels ran as 4 programs of 255 registers a thread (5 of
        52 us on the H200). 16 (the default since 0.9.14; 0 keeps 64). On the H200, bf16, % of
        4.3 TB/s (session 27, two runs): the batch norm's statistics over channels-last images 44
        -> 46 (the combine 5.1 -> 2.4 us), its backward's sums 84 -> 87-88 (4.2 -> 1.8 us); a
        column sum (91) and a layer norm's backward (84) unchanged.
    split_programs, split_max_chunks, split_min_rchunk: a looped reduction whose x blocks give
        fewer than a quarter of ``split_programs`` programs is split over r into at most
        ``split_max_chunks`` chunks of at least ``split_min_rchunk`` rows, reduced into partials
        that a second kernel combines (about 1024 programs fill an H200's 132 SMs several times
        over). ``split_max_chunks`` below 2 turns splitting off.
    online_softmax: in a looped reduction kernel, compute a softmax's row max and its sum of
        exp(x - max) in one r-loop (a running max and a rescaled running sum per group of
        ``online_group`` values) instead of two, so the row is read twice, not three times
        (``_online.py`` says when it applies).
        Off gives the plain form, for comparing the two.
    online_group: the online softmax's running max and sum are kept per group of this many
        consecutive values of a row (a power of two; at most one 16-byte vector of the widest
        input, so 8 for bfloat16 and 4 for float32: values one thread holds), not per value:
        a block's values are first reduced to their group's max, so a value costs a
        subtraction, an exp and an add, not a dozen instructions (``_online.py``). 1 keeps them
        per value (the form before, for comparison).
    aligned_rows: in a looped reduction kernel whose rows start off a 16-byte boundary or
        whose length is not a multiple of 16 (a vocabulary of 50257), walk each row from its
        start rounded down to a vector boundary, the blocks inside the row unmasked, so their
        loads and stores are 16-byte vector accesses (``_aligned.py`` says when it applies).
        Off gives the plain loop, for comparison.
    walked_rows_whole: a row that the aligned walk would loop over (``aligned_rows``), of
        2-byte values, that a looped kernel would read in two r-loops (a softmax over rows of
        GPT-2's vocabulary, 50257), and whose walked positions (``rnumel + vec - 1``, rounded up
        to a power of two) number at most this, is held whole in registers instead: one
        persistent block from the row's aligned start (``AlignedWalk.whole_row``), one row a
        program at ``walked_rows_whole_warps`` warps (fewer for a short row), the row read from
        memory once where the loop reads it twice. 0 (the default) keeps the loop. Timed on
        the H200 (session 27, the softmax over rows of 50257, % of 4.3 TB/s): bf16 48 at 16
        warps and at 32 (the loop: 72), fp16 46 / 48 (74), fp32 81 (80): one program of 16
        warps a SM at 128 registers hides too little latency. Offline (Triton 3.6, sm_90), rows of 50257 bfloat16 in a block of
        65536: 16-byte vector loads and stores, 128 registers a thread at 16 warps, 24.2
        instructions a value (26.6 at 32 warps; the looped walk: about 26 over its two
        r-loops, reading the row twice). The row's edge lanes are stored from a block of their
        own (``_aligned.AlignedWalk.edge_lines``): from the row's block, 34.9.
    eviction_hints: in a looped reduction kernel that reads a buffer in more than one r-loop (a
        softmax's row: once for its max and sum, once to write it), load it ``evict_last`` in
        the earlier loops and ``evict_first`` in the last, so the row's second read finds it in
        the L2 cache rather than DRAM (``_eviction.py``). Off gives plain loads, for comparison.
    reread_stores_evict_first: with the eviction hints, the stores of the last r-loop that
        reads a row again (a softmax's output) are ``eviction_policy="evict_first"`` too, so
        the output's lines leave L2 before the rows still to be read a second time (a 100 MB
        output written through L2 competes with them). False (the default) keeps plain
        stores: on the H200 (session 27) the softmax over rows of 50257 gave the same figures
        either way (bf16 72%, fp16 74, fp32 80).
    welford_shifted_sums: a looped float32 Welford reduction (a variance, a batch norm's
        statistics) sums each lane's values shifted by its first one and makes (mean, m2) once
        after the loop (``_reductions._shifted_sums``), where Welford's update per value costs
        two more instructions and a running mean. Off gives the update, for comparison.
    loop_stages: software pipelining of a looped reduction's r-loop (``tl.range(...,
        num_stages=loop_stages)``; ``_assemble.r_loop``): Triton copies the loads of the
        iterations ahead into shared memory (cp.async) while the program computes on the
        current one, so a loop bound by its one load's latency per iteration (an outer
        reduction, whose registers a thread hold few values) keeps more of memory in flight.
        1 is the plain loop. Not the aligned walk's loops.
    erf_two_ranges: a float32 erf as ``_tk_erf_two_ranges`` (the kernel prelude) rather than
        libdevice's ``erff``: ``x + x * P(x^2)`` up to |x| = 0.921875, ``sign(x) * (1 -
        exp(Q(min(|x|, 4))))`` above, each polynomial's coefficients inline (libdevice selects
        one set per value by range, 13 moves a value), the exp one ``ex2.approx.ftz`` (its
        argument is above -19). Within 1.5 ulp of float64's erf over [-5, 5] and at tiny
        values (``benchmarks/gpu_erf_probe.py``). GELU's backward in bf16 (47.5 sm_90
        instructions a value, against about 46 that 4.3 TB/s leaves for two reads and a write)
        is the case.
    debug_asserts: emit ``tl.device_assert`` bounds checks for indirect indices.
    cache_dir: where kernel sources are written (plus ``/triton``); None means the shared cache
        root (``torchkiln_loop_ir.codecache.cache_root``).
    compile_workers: threads compiling a graph's kernels to GPU binaries right after code
        generation, before the first call (``precompile.py``); None means ``os.cpu_count()``, 0
        leaves each kernel to compile at its first launch. No effect under the interpreter.
    compile_in_processes: compile those kernels in a pool of worker processes (as many as
        ``compile_workers``; started once per process, when a graph first has enough kernels)
        that fill Triton's on-disk cache, the main process then finding each binary there
        (``compile_pool.py``); False compiles on threads only (Triton's front end holds the GIL,
        so threads overlap little).
    """

    persistent_rnumel: int = 8192
    pointwise_xblock: int = 1024
    looped_rblock: int = 2048
    looped_values_per_thread: int = 8
    looped_vector_scale: int = 2
    reread_rnumel: int = 32768
    reread_rblock: int = 16384
    transposed_rblock: int = 64
    transposed_xblock: int = 64
    transposed_tile: int = 4096
    transposed_min_programs: int = 16
    transposed_values_per_thread: int = 8
    transposed_welford_xblock: int = 128
    transposed_welford_tile: int = 8192
    transposed_welford_values_per_thread: int = 64
    transposed_welford_min_programs: int = 128
    mixed_values_per_thread: int = 16
    mixed_rows: int = 0
    mixed_stages: int = 0
    split_programs: int = 1024
    split_max_chunks: int = 64
    split_min_rchunk: int = 128
    autotune: bool = False
    online_softmax: bool = True
    online_group: int = 8
    aligned_rows: bool = True
    walked_rows_whole: int = 0
    walked_rows_whole_warps: int = 16
    eviction_hints: bool = True
    reread_stores_evict_first: bool = False
    welford_shifted_sums: bool = True
    loop_stages: int = 1
    erf_two_ranges: bool = False
    debug_asserts: bool = False
    cache_dir: str | None = None
    compile_workers: int | None = None
    compile_in_processes: bool = True
