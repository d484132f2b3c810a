"""Transformers' decoders build their causal mask inside forward; under a compiler it is a
tensor from ``arange`` comparisons, which aot-partition's sdpa_masks.py turns back into
``is_causal=True`` (the mask-free kernel eager runs). Small Llama and GPT-2 models on the CPU,
inference and a training step: outputs and gradients equal eager's on fresh inputs, and the
report says what became of each mask."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln

transformers = pytest.importorskip("transformers")

VOCAB = 256


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "llama":
        config = transformers.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=4,
            vocab_size=VOCAB,
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB)
        model = transformers.GPT2LMHeadModel(config)
    model.config.use_cache = False
    return model.eval()


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(seed))


def _attention(compiled) -> list[str]:
    return [line for g in torchkiln.report(compiled).graphs for line in g.attention]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_causal_masks_become_is_causal_and_outputs_equal_eager(name):
    model = _model(name)
    compiled = torchkiln.compile(model, options={"strict": True})
    with torch.no_grad():
        compiled(_ids(0))
        lines = _attention(compiled)
        causal = [line for line in lines if line.endswith("is_causal=True")]
        assert len(causal) == 2, lines  # one per layer
        for seed in (1, 2):
            ids = _ids(seed)
            torch.testing.assert_close(
                compiled(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4
            )


def test_a_training_step_through_is_causal_equals_eager():
    model = _model("llama").train()
    twin = copy.deepcopy(model)
    compiled = torchkiln.compile(twin, options={"strict": True})
    for seed in (3, 4):
        ids = _ids(seed)
        model.zero_grad(set_to_none=True)
        twin.zero_grad(set_to_none=True)
        want = model(ids, labels=ids).loss
        got = compiled(ids, labels=ids).loss
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        want.backward()
        got.backward()
        for (path, a), b in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=path)
    assert any(line.endswith("is_causal=True") for line in _attention(compiled))


def test_symbolic_lengths_keep_the_mask_and_equal_eager():
    """Under dynamic shapes the mask's size is symbolic: its value now says nothing of another
    length's, so it stays, and every length still equals eager."""
    model = _model("llama")
    compiled = torchkiln.compile(model, dynamic=True, options={"strict": True})
    with torch.no_grad():
        for length in (16, 24, 9):
            ids = torch.randint(0, VOCAB, (2, length))
            torch.testing.assert_close(
                compiled(ids).logits, model(ids).logits, rtol=1e-4, atol=1e-4
            )
    lines = _attention(compiled)
    assert lines and all("kept its mask (symbolic sequence lengths)" in line for line in lines)
