"""The conv suite: small convolution nets at a CPU-friendly image size (64x64), torch only.

What CPU users run and what oneDNN, batch-norm folding and channels-last are for: a VGG-style
stack (convolution, batch norm, ReLU, max pooling, linear head), a MobileNet-style net
(depthwise-separable convolutions, batch norm, SiLU, average pooling) and a ResNet-style net of
bottleneck blocks (residual adds). ``build(name, batch, seed)`` makes the model (eval mode, CPU,
float32, weights from ``seed``) and its inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def _conv_bn(
    cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1
) -> list[nn.Module]:
    return [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]


class VGGNet(nn.Module):
    """conv-bn-relu pairs, max pooling between stages, a linear classifier."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128), classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for w in widths:
            layers += [*_conv_bn(cin, w), nn.ReLU(), *_conv_bn(w, w), nn.ReLU(), nn.MaxPool2d(2)]
            cin = w
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class MobileBlock(nn.Module):
    """Depthwise 3x3 then pointwise 1x1, each with batch norm and SiLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            *_conv_bn(cin, cin, 3, stride, groups=cin),
            nn.SiLU(),
            *_conv_bn(cin, cout, 1),
            nn.SiLU(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class MobileNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 32, 3, 2), nn.SiLU())
        self.blocks = nn.Sequential(
            MobileBlock(32, 64, 1),
            MobileBlock(64, 128, 2),
            MobileBlock(128, 128, 1),
            MobileBlock(128, 256, 2),
        )
        self.head = nn.Linear(256, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand, each with batch norm; ReLU after the residual add."""

    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = 4 * mid
        self.body = nn.Sequential(
            *_conv_bn(cin, mid, 1),
            nn.ReLU(),
            *_conv_bn(mid, mid, 3, stride),
            nn.ReLU(),
            *_conv_bn(mid, cout, 1),
        )
        self.shortcut = (
            nn.Sequential(*_conv_bn(cin, cout, 1, stride))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


class BottleneckResNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.layers = nn.Sequential(
            Bottleneck(32, 16, 1), Bottleneck(64, 32, 2), Bottleneck(128, 32, 1)
        )
        self.head = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)).mean(dim=(2, 3)))


def _images(batch: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(batch, 3, 64, 64),)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple[Any, ...]]]] = {
    "vgg": (VGGNet, _images),
    "mobilenet": (MobileNet, _images),
    "resnet_bottleneck": (BottleneckResNet, _images),
}


def build(name: str, batch: int = 2, seed: int = 0) -> tuple[nn.Module, tuple[Any, ...]]:
    """The conv-suite model ``name`` (eval mode, CPU, float32, weights from ``seed``) and its
    inputs; batch norm running statistics are randomised so folding them is tested."""
    if name not in MODELS:
        raise KeyError(f"no conv-suite model {name!r}; the suite has {', '.join(MODELS)}")
    make_model, make_inputs = MODELS[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make_model().eval()
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.5, 0.5)
        inputs = make_inputs(batch)
    return model, inputs
