"""nn.Module: parameters, buffers, submodules, forward, training, forward hooks and pre-hooks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _conformance_harness import Program, ids, randn, run_program
from torch import nn

torch.manual_seed(7)


def x4():
    return (randn(2, 4),)


def img():
    return (randn(2, 3, 8, 8),)


class Linear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x)


class RawParameters(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3, 4))
        self.bias = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class ParameterMatmul(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return x @ self.w.t()


class Buffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.randn(4))
        self.register_buffer("std", torch.rand(4) + 0.5)

    def forward(self, x):
        return (x - self.mean) / self.std


class NonPersistentBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("pos", torch.arange(4.0), persistent=False)

    def forward(self, x):
        return x + self.pos


class NestedSubmodules(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = Linear()

    def forward(self, x):
        return self.head.lin(self.block(x)[:, :4])


class SharedSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.lin(x))


class TiedWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, ids):
        return self.out(self.emb(ids))


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class PoolFlatten(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(x), 1))


class LayerNormGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.norm(x))


class DropoutEval(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.drop(self.lin(x))


class EmbeddingBag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 4, padding_idx=0)

    def forward(self, ids):
        return self.emb(ids).mean(1)


class MultiheadAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        out, _ = self.attn(x, x, x, need_weights=False)
        return out


class CallsHelperMethod(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def _project(self, x, scale=1.0):
        return self.lin(x) * scale

    def forward(self, x):
        return self._project(x) + self._project(x, scale=0.5)


class PlainAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = 0.125
        self.num_heads = 2
        self.names = ("q", "k")

    def forward(self, x):
        return x * self.scale * self.num_heads * len(self.names)


class ParametersIteration(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.randn(4))
        self.b = nn.Parameter(torch.randn(4))

    def forward(self, x):
        total = x
        for p in self.parameters():
            total = total + p
        return total


class NamedParametersDict(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        params = dict(self.named_parameters())
        return x @ params["lin.weight"].t() + params["lin.bias"]


class ChildrenIteration(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Tanh()

    def forward(self, x):
        for child in self.children():
            x = child(x)
        return x


class IsinstanceSubmodule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.ReLU(), nn.LayerNorm(4)])

    def forward(self, x):
        for m in self.layers:
            if isinstance(m, nn.Linear):
                x = m(x) * 2
            else:
                x = m(x)
        return x


class ModuleCallsFunctionalOnWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        w = self.lin.weight
        return F.linear(x, w * 2, self.lin.bias)


class WeightShapeBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 6)

    def forward(self, x):
        if self.lin.weight.shape[0] > 4:
            return self.lin(x)[:, :4]
        return self.lin(x)


class Residual(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return x + self.inner(x)


class ResidualStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Residual(nn.Linear(4, 4)) for _ in range(3)])

    def forward(self, x):
        return self.blocks(x)


class MLPWithKwargsForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, scale=1.0, *, shift=0.0):
        return self.lin(x) * scale + shift


class ForwardHook(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_hook(lambda mod, inp, out: out * 2)

    def forward(self, x):
        return self.lin(x) + 1


class ForwardPreHook(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_pre_hook(lambda mod, inp: (inp[0] * -1,))

    def forward(self, x):
        return self.lin(x)


class ForwardHookReturnsNone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_hook(lambda mod, inp, out: None)

    def forward(self, x):
        return self.lin(x)


class HookWithKwargs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_pre_hook(
            lambda mod, args, kwargs: ((args[0] + 1,), kwargs), with_kwargs=True
        )

    def forward(self, x):
        return self.lin(x)


def _root_hooked() -> nn.Module:
    m = Linear()
    m.register_forward_hook(lambda mod, inp, out: out.relu())
    m.register_forward_pre_hook(lambda mod, inp: (inp[0] * 0.5,))
    return m


class RootHooked(nn.Module):
    """Hooks on the captured module itself (called through __call__)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = _root_hooked()

    def forward(self, x):
        return self.inner(x)


class BoundMethodTarget(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

    def encode(self, x):
        return torch.tanh(self.lin(x))


class GRUCellModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.GRUCell(4, 4)

    def forward(self, x):
        h = torch.zeros(x.shape[0], 4)
        for _ in range(2):
            h = self.cell(x, h)
        return h


PROGRAMS = [
    Program(Linear(), x4),
    Program(RawParameters(), x4),
    Program(ParameterMatmul(), x4),
    Program(Buffers(), x4),
    Program(NonPersistentBuffer(), x4),
    Program(NestedSubmodules(), x4),
    Program(SharedSubmodule(), x4),
    Program(TiedWeights(), lambda: (torch.randint(0, 10, (2, 5)),)),
    Program(Conv().eval(), img, name="ConvBnEval"),
    Program(Conv().train(), img, name="ConvBnTrain"),
    Program(PoolFlatten(), img),
    Program(LayerNormGelu(), x4),
    Program(DropoutEval().eval(), x4),
    Program(EmbeddingBag(), lambda: (torch.randint(0, 20, (2, 6)),)),
    Program(MultiheadAttention().eval(), lambda: (randn(2, 5, 8),)),
    Program(CallsHelperMethod(), x4),
    Program(PlainAttribute(), x4),
    Program(ParametersIteration(), x4),
    Program(NamedParametersDict(), x4),
    Program(ChildrenIteration(), x4),
    Program(IsinstanceSubmodule(), x4),
    Program(ModuleCallsFunctionalOnWeight(), x4),
    Program(WeightShapeBranch(), x4),
    Program(ResidualStack(), x4),
    Program(MLPWithKwargsForward(), x4, kwargs=lambda: {"scale": 2.0, "shift": 1.0}),
    Program(ForwardHook(), x4),
    Program(ForwardPreHook(), x4),
    Program(ForwardHookReturnsNone(), x4),
    Program(HookWithKwargs(), x4),
    Program(RootHooked(), x4),
    Program(BoundMethodTarget().encode, x4, name="bound_method_encode"),
    Program(BoundMethodTarget().forward, x4, name="bound_method_forward"),
    Program(GRUCellModule(), x4, rtol=1e-4, atol=1e-5),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)
