"""Hugging Face ``model.generate`` compiled end to end (issue 15), on tiny GPT-2 and Llama configs.

The model's forward is compiled as users do (``model.forward = torchkiln.compile(model.forward)``,
strict: an internal failure fails the test instead of falling back) and greedy decoding must give
eager's token ids and close logits. Graph counts are TorchDynamo's on the same programs (checked
with ``torch.compile(backend=<counting>)``, transformers 5.x):
  - static cache (``cache_implementation="static"`` or a ``StaticCache`` passed in): the prefill
    graph and one decode graph reused every step (one recompile: the cache is created lazily by the
    prefill), no graph break;
  - dynamic cache (the default): the prefill, the first decoding step, and one decode graph with
    the cache length symbolic (automatic dynamic shapes on the cache's tensors), no graph break.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import torchkiln
from tiny_transformers import tiny_model

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

VOCAB, NEW_COMMON = 64, 5


#: the tests seed torch's generator themselves (seed=None: weights drawn from it as it is)
_COMMON = {"vocab": VOCAB, "positions": 64, "seed": None, "bos_token_id": 1, "eos_token_id": 2}
MODELS = {
    "gpt2": lambda: tiny_model("GPT2LMHeadModel", hidden=64, layers=2, heads=2, **_COMMON),
    "llama": lambda: tiny_model(
        "LlamaForCausalLM", hidden=64, layers=2, heads=4, ffn=128, kv_heads=2, **_COMMON
    ),
}
# cache -> graphs after one generate call (TorchDynamo's counts, see the docstring)
GRAPHS = {"static": 2, "static_passed": 2, "dynamic": 3}


def _generate_kwargs(model, cache: str) -> dict:
    kwargs = {
        "max_new_tokens": NEW_COMMON,
        "do_sample": False,
        "pad_token_id": 0,
        "output_logits": True,
        "return_dict_in_generate": True,
    }
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    elif cache == "static_passed":
        # transformers 4.x's StaticCache also takes the batch size
        batch = (
            {"max_batch_size": 2}
            if "max_batch_size" in inspect.signature(transformers.StaticCache).parameters
            else {}
        )
        kwargs["past_key_values"] = transformers.StaticCache(
            config=model.config, max_cache_len=16, **batch
        )
    return kwargs


# transformers 5 renames generate's past_key_values to cache; older ones (the GPU host's) know only
# the old name, so the test keeps it
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
@pytest.mark.parametrize("cache", list(GRAPHS))
@pytest.mark.parametrize("model_name", list(MODELS))
def test_generate_matches_eager(model_name: str, cache: str) -> None:
    torch.manual_seed(0)
    model = MODELS[model_name]().eval()
    eager_forward = model.forward
    compiled = torchkiln.compile(model.forward, options={"strict": True})
    for call in ("first", "second"):  # the second generate call reuses every graph
        ids = torch.randint(3, VOCAB, (2, 5))
        with torch.no_grad():
            model.forward = eager_forward
            expected = model.generate(ids, **_generate_kwargs(model, cache))
            model.forward = compiled
            actual = model.generate(ids, **_generate_kwargs(model, cache))
        assert torch.equal(actual.sequences, expected.sequences), (
            f"{call} call: token ids differ from eager"
        )
        assert len(actual.logits) == len(expected.logits) == NEW_COMMON
        for step, (a, e) in enumerate(zip(actual.logits, expected.logits)):
            torch.testing.assert_close(
                a, e, rtol=1e-4, atol=1e-5, msg=lambda m, c=call, s=step: f"{c} call, step {s}: {m}"
            )
        report = torchkiln.report(compiled)
        assert report.num_graphs == GRAPHS[cache], f"{call} call: {report.num_graphs} graphs"
        assert not report.graph_breaks, report.graph_breaks
        assert not report.eager_fallbacks


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
@pytest.mark.parametrize("model_name", list(MODELS))
def test_forward_with_use_cache_called_directly(model_name: str) -> None:
    """``model(ids, use_cache=True)`` outside generate: the model builds its DynamicCache inside the
    compiled forward (cache layers are ABCs, the per-layer config view a Sequence) with no graph
    break, and the sequence length becomes symbolic at the first new length (automatic dynamic):
    two graphs for lengths 8, 12, 16 and 24. Before: 8 graphs, 21 breaks, one frame run eagerly."""
    torch.manual_seed(0)
    model = MODELS[model_name]().eval()
    compiled = torchkiln.compile(model, options={"strict": True})
    for length in (8, 12, 16, 24):
        ids = torch.randint(3, VOCAB, (2, length))
        with torch.no_grad():
            expected, actual = model(ids, use_cache=True), compiled(ids, use_cache=True)
        torch.testing.assert_close(actual.logits, expected.logits, rtol=1e-4, atol=1e-5)
        for got, want in zip(actual.past_key_values.layers, expected.past_key_values.layers):
            torch.testing.assert_close(got.keys, want.keys)
            torch.testing.assert_close(got.values, want.values)
    report = torchkiln.report(compiled)
    assert report.num_graphs == 2 and not report.graph_breaks and not report.eager_fallbacks, report


# prompt length -> graphs after generating from it (TorchDynamo's counts on the same programs)
PROMPT_GRAPHS = {"static": {5: 2, 7: 4, 9: 4, 11: 4}, "dynamic": {5: 3, 7: 4, 9: 4, 11: 4}}


@pytest.mark.parametrize("cache", list(PROMPT_GRAPHS))
@pytest.mark.parametrize("model_name", list(MODELS))
def test_new_prompt_lengths_recompile_once(model_name: str, cache: str) -> None:
    """Generations of 8 tokens from prompts of 5, 7, 9 and 11 tokens: the second prompt length
    recompiles the prefill (its length symbolic) and, for the static cache, the decode step (the
    cache's length, ``max_cache_len`` = prompt + new tokens, an int attribute of each cache layer,
    symbolic); later lengths reuse both. Before, the static cache's prefill recompiled for every
    prompt length (``max_cache_len`` pinned by value): 5 and 6 graphs after the 9 and 11 prompts."""
    torch.manual_seed(0)
    model = MODELS[model_name]().eval()
    eager_forward = model.forward
    compiled = torchkiln.compile(model.forward, options={"strict": True})
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    for prompt, graphs in PROMPT_GRAPHS[cache].items():
        ids = torch.randint(3, VOCAB, (2, prompt))
        with torch.no_grad():
            model.forward = eager_forward
            expected = model.generate(ids, **kwargs)
            model.forward = compiled
            actual = model.generate(ids, **kwargs)
        assert torch.equal(actual, expected), f"prompt of {prompt}: token ids differ from eager"
        report = torchkiln.report(compiled)
        assert report.num_graphs == graphs, f"prompt of {prompt}: {report.num_graphs} graphs"
        assert not report.graph_breaks and not report.eager_fallbacks, report
