"""Tiny Hugging Face transformers models captured whole: exactly one graph, outputs equal eager.

Random weights, tiny configs (hidden 32, 2 layers, 2-4 heads, vocab 64), eval mode. Skipped, with
the reason, only when transformers is not importable.
"""

from __future__ import annotations

import pytest
import torch
from _conformance_harness import RecordingBackend, assert_same, compile_with

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

VOCAB = 64
BATCH, SEQ = 2, 7


def _bert():
    cfg = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
        type_vocab_size=2,
    )
    return transformers.BertModel(cfg)


def _gpt2():
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=32, use_cache=False
    )
    return transformers.GPT2Model(cfg)


def _t5_encoder():
    cfg = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
    )
    return transformers.T5EncoderModel(cfg)


def _distilbert():
    cfg = transformers.DistilBertConfig(
        vocab_size=VOCAB,
        dim=32,
        n_layers=2,
        n_heads=2,
        hidden_dim=64,
        max_position_embeddings=32,
    )
    return transformers.DistilBertModel(cfg)


def _llama():
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        use_cache=False,
    )
    return transformers.LlamaModel(cfg)


def _ids():
    return torch.randint(1, VOCAB, (BATCH, SEQ))


def _ids_and_mask():
    ids = _ids()
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, -2:] = 0  # the second sequence is padded
    return ids, mask


MODELS = {
    "bert": _bert,
    "gpt2": _gpt2,
    "t5_encoder": _t5_encoder,
    "distilbert": _distilbert,
    "llama": _llama,
}


def _check(model_name: str, with_mask: bool) -> None:
    torch.manual_seed(0)
    model = MODELS[model_name]().eval()
    backend = RecordingBackend()
    compiled = compile_with(model, backend)
    for call in ("first call", "second call"):
        if with_mask:
            ids, mask = _ids_and_mask()
            kwargs = {"input_ids": ids, "attention_mask": mask}
        else:
            kwargs = {"input_ids": _ids()}
        with torch.no_grad():
            expected = model(**kwargs)
            actual = compiled(**kwargs)
        assert_same(actual, expected, rtol=1e-4, atol=1e-5, where=f"{model_name} {call}")
        assert backend.calls == 1, f"{model_name} {call}: {backend.calls} backend calls, expected 1"


@pytest.mark.parametrize("model_name", list(MODELS))
def test_model_input_ids(model_name: str) -> None:
    _check(model_name, with_mask=False)


@pytest.mark.parametrize("model_name", list(MODELS))
def test_model_with_attention_mask(model_name: str) -> None:
    _check(model_name, with_mask=True)
