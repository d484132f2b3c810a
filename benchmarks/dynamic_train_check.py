"""transformers' BERT, GPT-2 and T5 encoder (2 layers, width 64, dropout off) trained under
``torchkiln.compile(model, dynamic=True)`` at three sequence lengths: the output's and every
parameter gradient's largest difference from eager's, how many gradients are None in one and
not the other, and the graphs and fallbacks. A CPU correctness check of symbolic shapes in
training (no speed figure):

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python benchmarks/dynamic_train_check.py
"""

from __future__ import annotations

import warnings

import torch
import torchkiln
import transformers

MODELS = {
    "bert": (transformers.BertConfig, transformers.BertForMaskedLM),
    "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
    "t5enc": (transformers.T5Config, transformers.T5EncoderModel),
}
#: each config takes the fields it has: width 64, 2 layers, 4 heads, no dropout
SMALL = {
    **dict.fromkeys(("hidden_size", "n_embd", "d_model"), 64),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers"), 2),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads"), 4),
    **dict.fromkeys(("intermediate_size", "d_ff"), 128),
    "d_kv": 16,
    "vocab_size": 500,
    **dict.fromkeys(
        (
            "dropout_rate",
            "attention_probs_dropout_prob",
            "hidden_dropout_prob",
            "attn_pdrop",
            "resid_pdrop",
            "embd_pdrop",
        ),
        0.0,
    ),
}


def _model(config_cls, model_cls, state=None) -> torch.nn.Module:
    defaults = config_cls()
    model = model_cls(config_cls(**{k: v for k, v in SMALL.items() if hasattr(defaults, k)}))
    if state is not None:
        model.load_state_dict(state)
    return model.train()


def _output(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    for name, (config_cls, model_cls) in MODELS.items():
        model = _model(config_cls, model_cls)
        ref = _model(config_cls, model_cls, model.state_dict())
        compiled = torchkiln.compile(model, dynamic=True)
        for seq in (16, 24, 20):
            ids = torch.randint(0, 500, (2, seq))
            for p in [*model.parameters(), *ref.parameters()]:
                p.grad = None
            got, want = _output(compiled(input_ids=ids)), _output(ref(input_ids=ids))
            got.float().square().mean().backward()
            want.float().square().mean().backward()
            pairs = list(zip(model.parameters(), ref.parameters()))
            grad = max(
                ((p.grad - q.grad).abs().max().item() for p, q in pairs if p.grad is not None),
                default=0.0,
            )
            none = sum((p.grad is None) != (q.grad is None) for p, q in pairs)
            print(
                f"{name} seq {seq}: output {(got - want).abs().max().item():.2e}, "
                f"gradients {grad:.2e}, None in one only: {none}",
                flush=True,
            )
        report = torchkiln.report(compiled)
        fallbacks = [f.reason[:100] for f in report.eager_fallbacks]
        print(f"{name}: {len(report.graphs)} graph(s), fallbacks {fallbacks}")


if __name__ == "__main__":
    main()
