"""transformers models that capture used to split, in one graph, inference and training.

- BART, T5, Marian: their decoder's cache (``DynamicCache(config=...)``) deep-copies the flat
  config and edits the copy (``get_text_config``: ``copy.deepcopy``, ``to_dict``'s deep copy of
  ``__dict__``, ``delattr``/``setattr`` through the strict dataclass's ``__setattr__``). Capture
  models the copies as built during capture (``dynamo-capture/variables/copies.py``); 4 graphs.
- Mamba: under compilation it scans with ``associative_scan`` (an elementwise combine, inlined as
  graph ops: ``dynamo-capture/variables/scan.py``), and its cache layers start from
  ``dict.fromkeys``; 12 graphs. Eager scans sequentially.

Outputs, and in training every parameter's gradient, against eager on fresh inputs."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

SIZES = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
}
MODELS = {
    "bart": lambda: transformers.BartModel(transformers.BartConfig(vocab_size=128, **SIZES)),
    "marian": lambda: transformers.MarianModel(
        transformers.MarianConfig(vocab_size=128, pad_token_id=0, **SIZES)
    ),
    "t5": lambda: transformers.T5Model(
        transformers.T5Config(
            vocab_size=128, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16
        )
    ),
    "mamba": lambda: transformers.MambaModel(
        transformers.MambaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, state_size=4)
    ),
}


def _inputs(name):
    ids = {"input_ids": torch.randint(3, 128, (2, 12))}
    if name != "mamba":
        ids["decoder_input_ids"] = torch.randint(3, 128, (2, 7))
    return ids


@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
@pytest.mark.parametrize("name", list(MODELS))
def test_one_graph(name, train):
    torch.manual_seed(0)
    eager = MODELS[name]().eval()
    ours = copy.deepcopy(eager)
    compiled = torchkiln.compile(ours, options={"strict": True})
    for _ in range(2):
        inputs = _inputs(name)
        with torch.set_grad_enabled(train):
            out = compiled(**inputs).last_hidden_state
            expected = eager(**inputs).last_hidden_state
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        if train:
            out.pow(2).mean().backward()
            expected.pow(2).mean().backward()
            for (pname, p), q in zip(ours.named_parameters(), eager.parameters()):
                if q.grad is not None:
                    torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=pname)
            ours.zero_grad()
            eager.zero_grad()
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks, report
    assert not report.eager_fallbacks, report
