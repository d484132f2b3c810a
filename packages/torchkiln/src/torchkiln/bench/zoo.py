"""The bundled model zoo: small models covering the architectures the paper's benchmarks stress.

Needs nothing beyond torch. ``build(name, batch, seed)`` constructs a model deterministically
(weights from ``seed``) in eval mode on the CPU in float32, with its inputs. Sizes are chosen so
eager + torchkiln + torch.compile, 20+ timed runs each, run the whole zoo in minutes on 2 CPU cores.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class TinyResNet(nn.Module):
    """ResNet-style CNN with batch norm (eval: folded running statistics)."""

    def __init__(self, width: int = 16, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        self.layer1 = BasicBlock(width, width, 1)
        self.layer2 = BasicBlock(width, 2 * width, 2)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        shape = (b, t, self.heads, c // self.heads)
        q, k, v = (
            q.view(shape).transpose(1, 2),
            k.view(shape).transpose(1, 2),
            v.view(shape).transpose(1, 2),
        )
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(c // self.heads))
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        out = scores.softmax(dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, c))


class TransformerBlock(nn.Module):
    """Pre-norm block: LayerNorm, attention, LayerNorm, GELU MLP."""

    def __init__(self, dim: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyViT(nn.Module):
    """ViT-style encoder: patch embedding, class token, position embedding, encoder blocks."""

    def __init__(
        self, image: int = 32, patch: int = 8, dim: int = 64, depth: int = 2, classes: int = 10
    ) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(dim, 4, causal=False) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


class TinyGPT(nn.Module):
    """GPT-style decoder: token + position embeddings, causal attention blocks, tied LM head."""

    def __init__(self, vocab: int = 256, seq: int = 32, dim: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(TransformerBlock(dim, 4, causal=True) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class LlamaBlock(nn.Module):
    """Llama-style block: RMSNorm, rotary position embeddings, causal attention, SiLU-gated MLP."""

    def __init__(self, dim: int = 64, heads: int = 4, seq: int = 32, hidden: int = 172) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.wv, self.wo = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv_freq)
        self.register_buffer("cos", torch.cat([angles, angles], -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat([angles, angles], -1).sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.attn_norm(x)
        shape = (b, t, self.heads, c // self.heads)
        q = self.wq(h).view(shape).transpose(1, 2)
        k = self.wk(h).view(shape).transpose(1, 2)
        v = self.wv(h).view(shape).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / math.sqrt(c // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.wo(attn.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(
            nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens)
        )
        self.channel_mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class TinyMixer(nn.Module):
    """MLP-Mixer: LayerNorm/GELU MLPs over tokens and channels."""

    def __init__(
        self, image: int = 32, patch: int = 8, dim: int = 64, depth: int = 2, classes: int = 10
    ) -> None:
        super().__init__()
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, dim)
        self.blocks = nn.Sequential(*(MixerBlock((image // patch) ** 2, dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        p = self.patch
        x = (
            x.reshape(b, c, h // p, p, w // p, p)
            .permute(0, 2, 4, 1, 3, 5)
            .reshape(b, (h // p) * (w // p), c * p * p)
        )
        x = self.blocks(self.embed(x))
        return self.head(self.norm(x).mean(dim=1))


class TinyUNet(nn.Module):
    """A small U-Net: depthwise-separable convolution, max-pool, upsampling, a skip concat."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU())
        self.mid = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, groups=width),
            nn.Conv2d(width, 2 * width, 1),
            nn.BatchNorm2d(2 * width),
            nn.Hardswish(),
        )
        self.dec = nn.Sequential(nn.Conv2d(3 * width, width, 3, padding=1), nn.ReLU())
        self.out = nn.Conv2d(width, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = self.enc(x)
        y = self.mid(F.max_pool2d(skip, 2))
        y = F.interpolate(y, scale_factor=2.0, mode="nearest")
        return torch.sigmoid(self.out(self.dec(torch.cat([y, skip], dim=1))))


def _images(batch: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(batch, 3, 32, 32),)


# name -> (constructor, inputs for a batch); listed smallest first.
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple[Any, ...]]]] = {
    "mlp_mixer": (TinyMixer, _images),
    "resnet": (TinyResNet, _images),
    "unet": (TinyUNet, _images),
    "vit": (TinyViT, _images),
    "gpt": (TinyGPT, lambda batch: (torch.randint(0, 256, (batch, 32)),)),
    "llama_block": (LlamaBlock, lambda batch: (torch.randn(batch, 32, 64),)),
}


def build(name: str, batch: int = 2, seed: int = 0) -> tuple[nn.Module, tuple[Any, ...]]:
    """The zoo model ``name`` (eval mode, CPU, float32, weights from ``seed``) and its inputs."""
    if name not in MODELS:
        raise KeyError(f"no zoo model {name!r}; the zoo has {', '.join(MODELS)}")
    make_model, make_inputs = MODELS[name]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = make_model().eval()
        inputs = make_inputs(batch)
    return model, inputs
