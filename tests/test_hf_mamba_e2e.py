"""transformers' Mamba in one graph, inference and training: under compilation it scans with
``associative_scan`` (an elementwise combine, inlined as graph ops: ``dynamo-capture/variables/
scan.py``) and its cache layers start from ``dict.fromkeys``; it was 12 graphs. Outputs, and in
training every parameter's gradient, against eager (which scans sequentially) on fresh inputs."""

from __future__ import annotations

import copy

import pytest
import torch
import torchkiln

transformers = pytest.importorskip("transformers", reason="transformers is not installed")


@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
def test_mamba_in_one_graph(train):
    torch.manual_seed(0)
    config = transformers.MambaConfig(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=4
    )
    eager = transformers.MambaModel(config).eval()
    ours = copy.deepcopy(eager)
    compiled = torchkiln.compile(ours, options={"strict": True})
    for _ in range(2):
        ids = torch.randint(0, 64, (2, 12))
        with torch.set_grad_enabled(train):
            out = compiled(ids).last_hidden_state
            expected = eager(ids).last_hidden_state
        torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
        if train:
            out.pow(2).mean().backward()
            expected.pow(2).mean().backward()
            for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
                if q.grad is not None:
                    torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
            ours.zero_grad()
            eager.zero_grad()
    report = torchkiln.report(compiled)
    assert report.num_graphs == 1 and not report.graph_breaks, report
    assert not report.eager_fallbacks, report
