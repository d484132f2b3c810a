"""nn.Module forwards that break: a printing forward, a printing child, hooks, ModuleList loops.

Modules are built fresh per test under a fixed seed (``register(lambda: Model(), ...)``); stateful
ones (a call counter, a buffer) are module-level singletons reset by ``setup``.
"""

from __future__ import annotations

import numpy as np
import torch
from _breaks_harness import g34, register
from torch import nn

KIND = "modules"


def _seeded(cls, *args):
    def make():
        torch.manual_seed(0)
        return cls(*args)

    return make


class PrintLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        print("lin out", tuple(y.shape))
        return y.relu()


class ParentOfPrintingChild(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = PrintLinear()

    def forward(self, x):
        h = x * 2
        h = self.inner(h)
        return h + 1


class PrintLayer(nn.Module):
    def forward(self, x):
        print("PrintLayer", tuple(x.shape))
        return x


class ListOfPrintingBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([PrintLinear() for _ in range(3)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class SameBlockTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = PrintLinear()

    def forward(self, x):
        h = self.block(x)
        h = self.block(h)
        return h * 2


class DataDependentForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if h.abs().mean() > -100:
            return h.relu()
        return h


class NoGradStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            stats = x.mean()
            print("stats computed")
        return self.lin(x) - stats


class ItemInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        n = int((x > -100).sum())
        return self.lin(x) * n


class ChildWithPrintingHook(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.register_forward_hook(lambda mod, args, out: print("hook", tuple(out.shape)))

    def forward(self, x):
        return self.lin(x * 2) + 1


class KeywordForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, *, scale=1.0, verbose=False):
        h = self.lin(x)
        if verbose:
            print("scale", scale)
        return h * scale


class BreakingHelperMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 0.5

    def helper(self, t):
        print("helper")
        return t * self.scale

    def forward(self, x):
        return self.helper(self.lin(x)) + 1


class NumpyFlagForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        finite = bool(np.isfinite(h.detach().numpy()).all())
        return h.tanh() if finite else h


class ReturnsDictAfterBreak(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        print("building outputs")
        return {"out": h.sigmoid(), "aux": h.sum()}


class TwoLevelModules(nn.Module):
    def __init__(self):
        super().__init__()
        self.parent = ParentOfPrintingChild()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.parent(x.tanh()))


register(_seeded(PrintLinear), graphs=2, name="forward_prints", kind=KIND)
register(_seeded(ParentOfPrintingChild), graphs=4, name="parent_of_printing_child", kind=KIND)
register(
    _seeded(lambda: nn.Sequential(nn.Linear(4, 4), PrintLayer(), nn.Linear(4, 4))),
    graphs=2,
    name="sequential_with_printing_layer",
    kind=KIND,
)
# Each block compiles its own linear (guarded on the block), but the continuation after the
# print only holds ``y.relu()``: it does not read ``self``, so blocks 2 and 3 hit block 1's entry.
register(_seeded(ListOfPrintingBlocks), graphs=4, name="modulelist_of_printing_blocks", kind=KIND)
# The second call's input requires grad (it came out of a Linear), the first's does not: the
# linear piece compiles twice; the relu continuation (input requires grad both times) hits.
register(_seeded(SameBlockTwice), graphs=4, name="same_block_twice_hits_cache", kind=KIND)
register(_seeded(DataDependentForward), graphs=2, name="data_dependent_forward", kind=KIND)
register(_seeded(NoGradStats), graphs=2, inputs=g34, grad=True, name="no_grad_stats", kind=KIND)
register(_seeded(ItemInForward), graphs=2, name="int_of_tensor_in_forward", kind=KIND)
register(_seeded(ChildWithPrintingHook), graphs=3, name="child_with_printing_hook", kind=KIND)
register(
    _seeded(KeywordForward),
    graphs=2,
    name="keyword_forward_verbose",
    kind=KIND,
    kwargs=lambda: {"scale": 2.0, "verbose": True},
)
register(_seeded(BreakingHelperMethod), graphs=3, name="breaking_helper_method", kind=KIND)
register(_seeded(NumpyFlagForward), graphs=2, name="numpy_flag_in_forward", kind=KIND)
register(_seeded(ReturnsDictAfterBreak), graphs=2, name="returns_dict_after_break", kind=KIND)
register(_seeded(TwoLevelModules), graphs=6, name="two_levels_of_modules", kind=KIND)
register(
    _seeded(PrintLinear), graphs=2, inputs=g34, grad=True, name="forward_prints_grad", kind=KIND
)


class ScaledPrintLinear(PrintLinear):
    def forward(self, x):
        return super().forward(x) * 2


register(_seeded(ScaledPrintLinear), graphs=3, name="super_forward_prints", kind=KIND)


class CallCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        print("call", self.calls)
        return self.lin(x) * self.calls


class BufferCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count.add_(1)
        print("counted")
        return x * self.count


_CALLS = _seeded(CallCounter)()
_BUF = BufferCounter()


def _reset_calls():
    _CALLS.calls = 0


def _reset_buffer():
    with torch.no_grad():
        _BUF.count.zero_()


register(
    lambda: _CALLS,
    graphs=1,
    name="attribute_counter",
    kind=KIND,
    setup=_reset_calls,
    observe=lambda: _CALLS.calls,
)
register(
    lambda: _BUF,
    graphs=2,
    name="buffer_mutated_in_place",
    kind=KIND,
    setup=_reset_buffer,
    observe=lambda: _BUF.count.clone(),
)


class OptimizerLikeStep(nn.Module):
    """Updates its own parameters in place under no_grad, with a break in the middle."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        out = self.lin(x)
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
            print("stepped")
            self.lin.bias.zero_()
        return out, self.lin(x)


class HistoryModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = []

    def forward(self, x):
        h = x.relu()
        self.history.append(h.sum())
        print("history", len(self.history))
        return h * len(self.history)


_STEP = _seeded(OptimizerLikeStep)()
_STEP_INIT = {k: v.clone() for k, v in _STEP.state_dict().items()}
_HISTORY = HistoryModule()


def _reset_step():
    with torch.no_grad():
        _STEP.load_state_dict(_STEP_INIT)


def _reset_history():
    _HISTORY.history.clear()


register(
    lambda: _STEP,
    graphs=2,
    name="parameters_updated_in_place_across_break",
    kind=KIND,
    setup=_reset_step,
    observe=lambda: {k: v.clone() for k, v in _STEP.state_dict().items()},
)
register(
    lambda: _HISTORY,
    graphs=2,
    name="list_attribute_appended_across_break",
    kind=KIND,
    setup=_reset_history,
    observe=lambda: list(_HISTORY.history),
)


_HOOK_LOG: list = []


def _reset_hook_log():
    _HOOK_LOG.clear()


class ChildWithForwardHooks(nn.Module):
    """A child whose forward prints, with a pre-hook that rewrites the input and a kwargs forward
    hook: nn.Module runs the hooks around the child's captured forward."""

    def __init__(self):
        super().__init__()
        self.inner = PrintLinear()
        self.inner.register_forward_pre_hook(lambda mod, args: (args[0] * 3,))
        self.inner.register_forward_hook(lambda mod, args, kwargs, out: out + 1, with_kwargs=True)

    def forward(self, x):
        return self.inner(x - 1) * 2


class ChildWithBackwardHook(ChildWithForwardHooks):
    """The same with a full backward hook: the child runs whole in Python (its hooks wrap the
    autograd graph of the call), the parent's graphs around it are captured."""

    def __init__(self):
        super().__init__()
        self.inner.register_full_backward_hook(
            lambda mod, gin, gout: _HOOK_LOG.append(round(float(gout[0].abs().sum()), 3))
        )


# before the call, the child's forward up to its print, after its print, after the call
register(
    _seeded(ChildWithForwardHooks),
    graphs=4,
    inputs=g34,
    grad=True,
    name="child_with_forward_hooks",
    kind=KIND,
)
register(
    _seeded(ChildWithBackwardHook),
    graphs=2,
    inputs=g34,
    grad=True,
    setup=_reset_hook_log,
    observe=lambda: list(_HOOK_LOG),
    name="child_with_backward_hook",
    kind=KIND,
)
