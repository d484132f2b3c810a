"""The options of loop-IR compilation (frozen; passed down explicitly)."""

from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass


@dataclass(frozen=True)
class LoopIROptions:
    """Knobs of ``compile_graph``.

    max_fusions: fuel for the greedy fusion loop (None = unlimited, 0 = no fusion at all; one kernel
        per realized buffer); used to bisect a bad fusion.
    cache_dir: where wrappers are written (default: ``codecache.cache_root``, i.e.
        ``$TORCHKILN_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchkiln``, else ``~/.cache/torchkiln``).
    inline_max_reads: a pointwise value reading more buffers than this is realized.
    recompute_max_ops: a pointwise value read by several consumers is recomputed in each of them
        (when that moves no more bytes than storing it) only if it has at most this many ops an
        element (inline_cost.py). None (default): 32 on a GPU, whose ops hide behind its loads,
        16 on a CPU, whose ops do not.
    reuse_buffers: let a new buffer take the storage of a dead one of the same size and dtype.
    mkldnn_convolution: on a CPU backend, run 2-D float32 convolutions through oneDNN with
        channels-last activations, prepacked weights and a fused activation (mkldnn.py).
    mkldnn_linear: on a CPU backend, which float32 linear layers (``addmm``/``mm`` of a
        transposed weight input) run through oneDNN with a prepacked weight and their activation
        or residual add fused (mkldnn_linear.py): "measure" (default: where timing the shape at
        compile time says it is faster than ``addmm``), "always", or "never".
    cublas_epilogues: on a CUDA backend, which products followed by ReLU or the tanh GELU
        (GPT-2's and T5's MLPs) run as ``_addmm_activation``, the activation in cuBLASLt's
        epilogue instead of a kernel of its own (cublas_epilogues.py): "measure" (default:
        where timing the shape at compile time says the fused call is 3% faster), "always"
        (any backend: tests use it on the CPU), or "never".
    matmul_templates: where the code generator can compute a matrix product inside the kernel
        of its pointwise consumers (codegen-triton), which ``mm``/``addmm`` results read only by
        one pointwise kernel (an exact GELU, a SiLU, a residual add) are computed there, never
        written to memory (matmul_templates.py): "auto" (default: where the code generator
        says the fused kernel is faster than the extern and the kernel apart; codegen-triton
        times it at compile time under its ``autotune`` option (the max-autotune modes) and
        predicts it from the sizes otherwise), "always" (with the code generator's default
        tile; tests use it under Triton's interpreter), or "never".
    group_linears: on a CPU backend, run linear layers that read the same input (attention's
        query, key and value projections) as one GEMM of their concatenated weights
        (linear_group.py).
    pad_matmuls: pad matrix multiplies whose sizes are not a multiple of 16 bytes to aligned
        sizes (pad_mm.py): "auto" (default: on a CUDA backend, where cuBLAS's fast kernels need
        it; float32 products only under torch.backends.cuda.matmul.allow_tf32, since without
        TF32 they gain nothing from it), "always" (any backend and dtype; tests use it on the
        CPU), or "never".
    pad_matmul_outputs_only: where padding a product needs only its N padded and its second
        operand is aligned already (a transposed vocabulary weight), write the product into an
        (M, N') output through its (M, N) view instead of copying the operand padded on every
        call (pad_mm.py: the aligned columns and the few left over run as two products).
        "auto" (default): products without a bias (``mm``: GPT-2's head, whose bfloat16
        inference then peaks at eager's 797 MB instead of 871, and runs 4.80 -> 4.68 ms on an
        H100); True: ``addmm`` too, where ATen first copies the bias into the strided output
        (BERT 4.58 -> 5.00 ms, DistilBERT 4.80 -> 5.71, for 45 MB less peak memory); False:
        never (session 38, ``gpu_session.sh hf-full-padout`` against ``hf-full``).
    channels_last: run 2-D convolutions channels-last (channels_last.py; inference graphs with
        their weights converted once, training forward and backward graphs with their saved
        values channels-last): "auto" (default: inference and training graphs on a CUDA
        backend), "always" (any graph and backend; tests use it on the CPU), or "never".
    direct_convolution_taps: where ``channels_last`` runs an inference graph's convolutions, a
        depthwise one (one input channel per group) of at most this many taps (kernel height x
        width) is generated code summing its taps per output element (lowering/convolution.py),
        its bias and activation fused, instead of a cuDNN call. None (default): the limit
        measured against cuDNN (channels_last.py's ``_DIRECT_TAPS``: 25, up to 5x5); 0: never.
    depthwise_convolutions: where ``channels_last`` runs a graph's convolutions, a depthwise
        one of stride 1 with more taps than ``direct_convolution_taps`` (ConvNeXt's 7x7) runs
        as ``torchkiln::conv_depthwise``, its bias included, and in a training backward so does
        its input gradient (the output gradient convolved with the flipped taps): "auto"
        (default: inference graphs, where the code generator registered a kernel for the
        graph's device, ``channels_last.register_depthwise_kernel``; codegen-triton's strip
        kernel on CUDA; training graphs keep cuDNN's: the step is host-bound, and the
        kernel's saving did not show there, compile.py),
        "always" (inference and training graphs, any backend; without a registered kernel
        ATen computes it: tests), or "never" (a cuDNN call).
    max_pool_backward: how ``max_pool2d``'s gradient is computed: "auto" (default: generated
        code on a GPU, a gather pointwise over the input that its consumers may fuse; ATen's
        scatter on a CPU, 3-7x faster there, lowering/pooling.py), "generated" (any backend;
        tests use it on the CPU), or "aten". Dilated windows always run ATen's kernel.
    coalesce_transposed_copies: write a copy that ATen's matmul makes of a transposed operand
        (attention's ``k^T``) in the order it reads, the product then reading it transposed
        (transposed_copies.py; every backend).
    fold_scatter_adds: write ``add(x, index_put(zeros, idx, v, accumulate=True))`` (a tied
        embedding's two weight gradients summed) as ``index_put(x, idx, v, accumulate=True)``:
        no zero-filled buffer of the vocabulary's size, no pass to sum it
        (scatter_add_fold.py; every backend). On by default.
    generated_conv_bias_grads: a convolution backward's bias gradient is a sum loop-ir
        generates over the output gradient, not ATen's reduction inside
        ``convolution_backward`` (conv_bias_grads.py; every backend). ``"auto"`` (default): on
        for graphs on a CUDA device, where a layer norm after the convolution (ConvNeXt's
        blocks) takes the sum into its backward's mixed-order kernel (``mixed_order.py``):
        ConvNeXt-tiny's bfloat16 training step on an H100 5.3% faster (session 39, in-process
        A/B; ATen's 18 reductions ran at a tenth of the bandwidth), ViT-B's 0.9% (its patch
        embedding's sum a kernel of its own). ``True`` on every device, ``False`` never
        (session 36: without that fusion each sum stayed a kernel of its own and the step did
        not get faster). Another value is a ``ValueError``.
    addmm_bias_in_consumer: lower ``addmm(bias, a, b)`` whose result (through views) only
        pointwise and reduction code reads (nothing that reads memory, not a graph output) as
        ``mm(a, b)`` with the bias added in that generated code (as the convolution
        lowering does with its bias on GPUs; torch.compile's default). The sum is rounded to
        the output dtype after the product is, where ``addmm`` rounds once. cuBLAS chooses its
        kernel for ``mm`` by other rules than for ``addmm`` with a bias epilogue (float32 BERT:
        0.29 ms of 47 per step in other tiles, session 10). Off by default until measured on
        the GPU (``python -m torchkiln bench --options '{"loop_ir":
        {"addmm_bias_in_consumer": true}}'``).
    fallback_random: run random ops (``rand``, ``bernoulli``, dropout, every op tagged
        ``nondeterministic_seeded``) as ATen calls drawing from torch's generator, as eager does,
        instead of generated code from per-call seeds: results and the generator's state after
        the call are eager's under the same ``torch.manual_seed`` (Inductor's ``fallback_random``;
        off by default, as there: the generated draws are faster and differently random).
    split_programs: how many programs a long reduction with too few outputs to fill the device is
        split to (``lowering/split_reductions.py``): None (default) takes the backend's
        ``BackendCapabilities.parallel_programs`` (a few per SM on a GPU, 0 on a CPU), 0 splits
        only reductions into fewer than 64 outputs (as on every backend), another number
        overrides the backend's (tests use it to split small reductions on the CPU).
    mixed_order_reductions: let a row reduction's kernel also reduce the columns of the same
        rows (a layer norm backward's weight and bias gradients beside its input gradient): the
        column reduction is split into chunks of rows, one a program of the row kernel, and the
        scheduler may fuse them (``mixed_order.py``), where the backend can emit such a kernel
        (``BackendCapabilities.mixed_order_rnumel``). True (default): the columns of values
        the row kernel loads, and of a value it computes from its row reductions (a layer
        norm backward's input gradient, whose column sums are the bias gradient of the
        linear or convolution before it); ``"loaded"``: only the former (loop-ir 0.8.25's
        rule, kept for A/B runs); False keeps two kernels.
    mixed_order_narrow_programs: a mixed-order kernel over narrow rows launches up to this many
        times the target programs (``mixed_order.narrow_programs``: rows of up to 256 values
        all of it, of 384 and 512 twice, longer rows once), so that more warps a SM keep loads
        in flight; 1 keeps the target. Session 40 (H100, bf16): a layer norm backward over rows
        of 192 moved 1083 -> 1554 GB/s at four times the programs, over rows of 384 1220 ->
        1488 at twice; ConvNeXt-tiny's training step 1.0% faster.
    combo_kernels: launch independent small pointwise kernels (autocast's casts of the
        parameters in a training forward, of the gradients at the end of its backward, batch
        norms' ``num_batches_tracked += 1``) as one kernel, each over its own range
        (``combos.py``), where the backend can (``BackendCapabilities.combo_kernels``):
        "auto" (default: graphs on a CUDA device, where each launch costs host time), "always"
        (any device; tests use it on the CPU under Triton's interpreter), or "never".
    autotune: deprecated, not a field: loop-ir never autotuned (block-size search is the Triton
        code generator's ``TritonOptions.autotune``); still accepted, with a DeprecationWarning.
    """

    max_fusions: int | None = None
    cache_dir: str | None = None
    inline_max_reads: int = 8
    recompute_max_ops: int | None = None
    reuse_buffers: bool = True
    mkldnn_convolution: bool = True
    mkldnn_linear: str = "measure"
    cublas_epilogues: str = "measure"
    matmul_templates: str = "auto"
    group_linears: bool = True
    pad_matmuls: str = "auto"
    pad_matmul_outputs_only: bool | str = "auto"
    channels_last: str = "auto"
    direct_convolution_taps: int | None = None
    depthwise_convolutions: str = "auto"
    max_pool_backward: str = "auto"
    coalesce_transposed_copies: bool = True
    fold_scatter_adds: bool = True
    generated_conv_bias_grads: bool | str = "auto"
    addmm_bias_in_consumer: bool = False
    fallback_random: bool = False
    split_programs: int | None = None
    mixed_order_reductions: bool | str = True
    mixed_order_narrow_programs: int = 4
    combo_kernels: str = "auto"
    autotune: InitVar[bool | None] = None

    def __post_init__(self, autotune: bool | None) -> None:
        if self.mkldnn_linear not in ("measure", "always", "never"):
            raise ValueError(
                "LoopIROptions.mkldnn_linear must be 'measure', 'always' or 'never', "
                f"got {self.mkldnn_linear!r}"
            )
        if self.matmul_templates not in ("auto", "always", "never"):
            raise ValueError(
                "LoopIROptions.matmul_templates must be 'auto', 'always' or 'never', "
                f"got {self.matmul_templates!r}"
            )
        if self.cublas_epilogues not in ("measure", "always", "never"):
            raise ValueError(
                "LoopIROptions.cublas_epilogues must be 'measure', 'always' or 'never', "
                f"got {self.cublas_epilogues!r}"
            )
        if self.pad_matmuls not in ("auto", "always", "never"):
            raise ValueError(
                "LoopIROptions.pad_matmuls must be 'auto', 'always' or 'never', "
                f"got {self.pad_matmuls!r}"
            )
        if self.pad_matmul_outputs_only not in (True, False, "auto"):
            raise ValueError(
                "LoopIROptions.pad_matmul_outputs_only must be True, False or 'auto', "
                f"got {self.pad_matmul_outputs_only!r}"
            )
        if self.channels_last not in ("auto", "always", "never"):
            raise ValueError(
                "LoopIROptions.channels_last must be 'auto', 'always' or 'never', "
                f"got {self.channels_last!r}"
            )
        if self.mixed_order_reductions not in (True, False, "loaded"):
            raise ValueError(
                "LoopIROptions.mixed_order_reductions must be True, False or 'loaded', "
                f"got {self.mixed_order_reductions!r}"
            )
        if self.mixed_order_narrow_programs < 1:
            raise ValueError(
                "LoopIROptions.mixed_order_narrow_programs must be >= 1, "
                f"got {self.mixed_order_narrow_programs!r}"
            )
        if self.generated_conv_bias_grads not in (True, False, "auto"):
            raise ValueError(
                "LoopIROptions.generated_conv_bias_grads must be True, False or 'auto', "
                f"got {self.generated_conv_bias_grads!r}"
            )
        if self.combo_kernels not in ("auto", "always", "never"):
            raise ValueError(
                "LoopIROptions.combo_kernels must be 'auto', 'always' or 'never', "
                f"got {self.combo_kernels!r}"
            )
        if self.depthwise_convolutions not in ("auto", "always", "never"):
            raise ValueError(
                "LoopIROptions.depthwise_convolutions must be 'auto', 'always' or 'never', "
                f"got {self.depthwise_convolutions!r}"
            )
        if self.max_pool_backward not in ("auto", "generated", "aten"):
            raise ValueError(
                "LoopIROptions.max_pool_backward must be 'auto', 'generated' or 'aten', "
                f"got {self.max_pool_backward!r}"
            )
        if self.direct_convolution_taps is not None and self.direct_convolution_taps < 0:
            raise ValueError(
                "LoopIROptions.direct_convolution_taps must be >= 0, "
                f"got {self.direct_convolution_taps!r}"
            )
        if self.split_programs is not None and self.split_programs < 0:
            raise ValueError(
                f"LoopIROptions.split_programs must be None or >= 0, got {self.split_programs!r}"
            )
        if autotune is not None:
            warnings.warn(
                "LoopIROptions(autotune=...) is deprecated and does nothing: loop-ir does not "
                "autotune (TritonOptions.autotune does)",
                DeprecationWarning,
                stacklevel=3,
            )
