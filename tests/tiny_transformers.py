"""Tiny Hugging Face models with random weights, for the end-to-end tests of this folder.

``tiny_model("BertModel", vocab=99, hidden=32, layers=2, heads=4, ffn=37)`` builds the class's
config from a few sizes named alike for every family (each family spells them its own way: BERT's
``hidden_size`` is GPT-2's ``n_embd`` and DistilBERT's ``dim``), seeds torch's generator and builds
the model, so two tests asking for the same sizes get the same weights. The test skips when
transformers is not installed.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

# BERT's spelling of the sizes, which Llama shares
_BERT = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)
#: family (the class name's prefix) -> its config's names for vocab, hidden, layers, heads, ffn,
#: positions and key/value heads (None: the family has no such field)
_FIELDS: dict[str, tuple[str | None, ...]] = {
    "DistilBert": (
        "vocab_size",
        "dim",
        "n_layers",
        "n_heads",
        "hidden_dim",
        "max_position_embeddings",
        None,
    ),
    "Bert": (*_BERT, None),
    "GPT2": ("vocab_size", "n_embd", "n_layer", "n_head", "n_inner", "n_positions", None),
    "T5": ("vocab_size", "d_model", "num_layers", "num_heads", "d_ff", None, None),
    "Llama": (*_BERT, "num_key_value_heads"),  # BERT's names, and grouped-query heads
}
#: what a family's tiny config sets beyond the sizes (GPT-2's token ids default past a tiny vocab)
_DEFAULTS: dict[str, dict[str, Any]] = {"GPT2": {"bos_token_id": 0, "eos_token_id": 0}}


def tiny_model(
    model_class: str,
    *,
    vocab: int,
    hidden: int,
    layers: int,
    heads: int,
    ffn: int | None = None,
    positions: int | None = None,
    kv_heads: int | None = None,
    seed: int | None = 0,
    **extra: Any,
) -> torch.nn.Module:
    """``transformers.<model_class>`` of those sizes (None: the config's default), weights drawn
    after ``torch.manual_seed(seed)`` (None: from the generator as it is); ``extra`` goes to the
    config as it is (``use_cache=False``, ``d_kv=8``, token ids)."""
    transformers = pytest.importorskip("transformers")
    family = next(f for f in _FIELDS if model_class.startswith(f))
    sizes = (vocab, hidden, layers, heads, ffn, positions, kv_heads)
    config: dict[str, Any] = dict(_DEFAULTS.get(family, {}))
    for field, value in zip(_FIELDS[family], sizes, strict=True):
        if value is not None:
            if field is None:
                raise TypeError(f"{family} configs have no field for {value!r}")
            config[field] = value
    config.update(extra)
    cfg = getattr(transformers, f"{family}Config")(**config)
    if seed is not None:
        torch.manual_seed(seed)
    return getattr(transformers, model_class)(cfg)
