"""Model suites: the bundled zoo, Hugging Face transformers (random weights from configs) and timm.

A suite is a list of ``ModelSpec``; ``load_suite(name)`` raises ``SuiteUnavailable`` (with the
reason) when the suite's library is not installed, and the command skips it with that message.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from torchkiln.bench import zoo

SUITES = ("zoo", "hf", "timm")


class SuiteUnavailable(RuntimeError):
    """The library a suite needs is not installed."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    suite: str
    build: Callable[
        [int], tuple[torch.nn.Module, tuple[Any, ...]]
    ]  # batch -> (model, inputs), CPU fp32


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


def _hf_configs(transformers: Any) -> dict[str, Callable[[], Any]]:
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


def hf_suite(seq: int = 32) -> list[ModelSpec]:
    transformers = _require("transformers", "hf")

    def builder(
        make: Callable[[], Any],
    ) -> Callable[[int], tuple[torch.nn.Module, tuple[Any, ...]]]:
        def build(batch: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model = make().eval()
                model.config.use_cache = False
                ids = torch.randint(0, 1024, (batch, seq))
            return model, (ids,)

        return build

    return [
        ModelSpec(name, "hf", builder(make)) for name, make in _hf_configs(transformers).items()
    ]


TIMM_MODELS = (
    "resnet50",
    "mobilenetv3_large_100",
    "vit_base_patch16_224",
    "convnext_tiny",
    "efficientnet_b0",
)


def timm_suite() -> list[ModelSpec]:
    timm = _require("timm", "timm")

    def build(name: str, batch: int) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = timm.create_model(name, pretrained=False).eval()
            inputs = (torch.randn(batch, 3, 224, 224),)
        return model, inputs

    return [
        ModelSpec(name, "timm", lambda batch, name=name: build(name, batch)) for name in TIMM_MODELS
    ]


def load_suite(name: str) -> list[ModelSpec]:
    """The models of suite ``name`` (zoo, hf, timm); SuiteUnavailable if its library is missing."""
    loaders = {"zoo": zoo_suite, "hf": hf_suite, "timm": timm_suite}
    if name not in loaders:
        raise ValueError(f"unknown suite {name!r}; pick one of {', '.join(SUITES)} or all")
    return loaders[name]()
