"""The options of loop-IR compilation (frozen; passed down explicitly)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoopIROptions:
    """Knobs of ``compile_graph``.

    max_fusions: fuel for the greedy fusion loop (None = unlimited, 0 = no fusion at all; one kernel
        per realized buffer); used to bisect a bad fusion.
    cache_dir: where wrappers are written (default: ``codecache.cache_root``, i.e.
        ``$TORCHKILN_CACHE_DIR``, else ``$XDG_CACHE_HOME/torchkiln``, else ``~/.cache/torchkiln``).
    inline_max_reads: a pointwise value reading more buffers than this is realized.
    reuse_buffers: let a new buffer take the storage of a dead one of the same size and dtype.
    mkldnn_convolution: on a CPU backend, run 2-D float32 convolutions through oneDNN with
        channels-last activations, prepacked weights and a fused activation (mkldnn.py).
    """

    max_fusions: int | None = None
    cache_dir: str | None = None
    inline_max_reads: int = 8
    reuse_buffers: bool = True
    mkldnn_convolution: bool = True
    autotune: bool = False  # accepted for the meta-package; loop-ir itself does not autotune
