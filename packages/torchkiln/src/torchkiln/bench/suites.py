"""Model suites: the bundled zoo, small convolution nets (conv), Hugging Face transformers (random
weights from configs) and timm.

A suite is a list of ``ModelSpec``; ``load_suite(name, size)`` raises ``SuiteUnavailable`` (with
the reason) when the suite's library is not installed, and the command skips it with that message.
``size="small"`` builds the CI/CPU configs (2-layer, hidden-128 transformers at sequence 32);
``size="full"`` the libraries' default configs at the sizes people run (bert-base, distilbert-base,
gpt2, t5-base's encoder, an 8-layer Llama of width 1024; sequence 512, Llama 1024), each with the
batch that fills a large GPU (``ModelSpec.batch``; ``--batch`` overrides it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torchkiln.bench import convnets, zoo

SUITES = ("zoo", "conv", "hf", "timm")
SIZES = ("small", "full")


class SuiteUnavailable(RuntimeError):
    """The library a suite needs is not installed."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    suite: str
    build: Callable[
        [int], tuple[torch.nn.Module, tuple[Any, ...]]
    ]  # batch -> (model, inputs), CPU fp32
    batch: int | None = None  # the batch this size of the model is run at (None: the command's)


def _require(module: str, suite: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise SuiteUnavailable(
            f"suite {suite!r} skipped: {module} is not installed ({error})"
        ) from None


def zoo_suite() -> list[ModelSpec]:
    return [
        ModelSpec(name, "zoo", lambda batch, name=name: zoo.build(name, batch))
        for name in zoo.MODELS
    ]


def conv_suite() -> list[ModelSpec]:
    """Small convolution nets (bench/convnets.py): VGG-, MobileNet- and ResNet-style, 64x64."""
    return [
        ModelSpec(name, "conv", lambda batch, name=name: convnets.build(name, batch))
        for name in convnets.MODELS
    ]


def _hf_small(transformers: Any) -> dict[str, Callable[[], Any]]:
    small = {
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 256,
    }
    return {
        "bert": lambda: transformers.BertModel(transformers.BertConfig(vocab_size=1024, **small)),
        "distilbert": lambda: transformers.DistilBertModel(
            transformers.DistilBertConfig(
                vocab_size=1024, dim=128, n_layers=2, n_heads=4, hidden_dim=256
            )
        ),
        "gpt2": lambda: transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=1024, n_embd=128, n_layer=2, n_head=4, n_positions=128
            )
        ),
        "t5_encoder": lambda: transformers.T5EncoderModel(
            transformers.T5Config(
                vocab_size=1024, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4
            )
        ),
        "llama": lambda: transformers.LlamaForCausalLM(
            transformers.LlamaConfig(
                vocab_size=1024, num_key_value_heads=4, max_position_embeddings=128, **small
            )
        ),
    }


#: full size: (model name) -> (builder, batch, sequence length); the libraries' default configs
def _hf_full(transformers: Any) -> dict[str, tuple[Callable[[], Any], int, int]]:
    t5_base = {"d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_heads": 12}
    llama = {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "max_position_embeddings": 2048,
    }
    return {
        "bert": (lambda: transformers.BertForMaskedLM(transformers.BertConfig()), 16, 512),
        "distilbert": (
            lambda: transformers.DistilBertForMaskedLM(transformers.DistilBertConfig()),
            32,
            512,
        ),
        "gpt2": (lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config()), 16, 512),
        "t5_encoder": (
            lambda: transformers.T5EncoderModel(transformers.T5Config(**t5_base)),
            16,
            512,
        ),
        "llama": (
            lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**llama)),
            8,
            1024,
        ),
    }


def hf_suite(size: str = "small", seq: int = 32) -> list[ModelSpec]:
    transformers = _require("transformers", "hf")

    def builder(
        make: Callable[[], Any], length: int
    ) -> Callable[[int], tuple[torch.nn.Module, tuple[Any, ...]]]:
        def build(batch: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = make().eval()
                model.config.use_cache = False
                vocab = min(int(model.config.vocab_size), 1024)
                ids = torch.randint(0, vocab, (batch, length))
            return model, (ids,)

        return build

    if size == "full":
        return [
            ModelSpec(name, "hf", builder(make, length), batch)
            for name, (make, batch, length) in _hf_full(transformers).items()
        ]
    return [
        ModelSpec(name, "hf", builder(make, seq)) for name, make in _hf_small(transformers).items()
    ]


TIMM_MODELS = (
    "resnet50",
    "mobilenetv3_large_100",
    "vit_base_patch16_224",
    "convnext_tiny",
    "efficientnet_b0",
)


#: full-size batch per timm model (224x224 images)
TIMM_BATCH = {"mobilenetv3_large_100": 128, "efficientnet_b0": 128}


def timm_suite(size: str = "full") -> list[ModelSpec]:
    timm = _require("timm", "timm")

    def build(name: str, batch: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = timm.create_model(name, pretrained=False).eval()
            inputs = (torch.randn(batch, 3, 224, 224),)
        return model, inputs

    return [
        ModelSpec(
            name,
            "timm",
            lambda batch, name=name: build(name, batch),
            TIMM_BATCH.get(name, 64) if size == "full" else None,
        )
        for name in TIMM_MODELS
    ]


def load_suite(name: str, size: str = "small") -> list[ModelSpec]:
    """The models of suite ``name`` (zoo, conv, hf, timm) at ``size`` (small, full; the zoo and
    conv suites have one size); SuiteUnavailable if its library is missing."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; pick one of {', '.join(SIZES)}")
    if name == "zoo":
        return zoo_suite()
    if name == "conv":
        return conv_suite()
    if name == "hf":
        return hf_suite(size)
    if name == "timm":
        return timm_suite(size)
    raise ValueError(f"unknown suite {name!r}; pick one of {', '.join(SUITES)} or all")
