"""What Hugging Face generation does around a model's forward, as small programs (issue 15).

Each pattern once broke ``model.generate`` under capture:
  - ``transformers.utils.deprecation.deprecate_kwarg`` wraps ``LlamaForCausalLM.forward`` in a
    ``def wrapped_func(*args, **kwargs)`` that reads ``args[0]`` (self); compiling the bound method
    ``model.forward`` lost self (IndexError in the step after the break).
  - a static key/value cache: preallocated tensors on a plain object, written in place at
    ``cache_position`` and created lazily on the first (prefill) call: one graph per phase, no
    recompile per position.
  - a dynamic cache: tensors on an object that grow by one each step (``torch.cat``). TorchDynamo
    makes the grown dim symbolic at the first recompile (automatic dynamic shapes for every input
    source, not only arguments): the prefill, the first decoding step and one symbolic decoding
    graph; torchkiln recompiled every step until the recompile limit.

Checked against the peer (``TORCHKILN_CONFORMANCE_PEER=dynamo``): same graph counts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest
import torch
from _conformance_harness import (
    Program,
    RecordingBackend,
    assert_same,
    compile_with,
    ids,
    randn,
    run_program,
)
from torch import nn

B, H, L, D = 2, 2, 8, 4  # batch, heads, cache length, head dim


# ----------------------------------------------------------------------------- *args wrappers


def renames_kwarg(old: str, new: str):
    """Like transformers' deprecate_kwarg: a ``*args, **kwargs`` wrapper that reads self as args[0]."""

    def wrapper(func):
        @functools.wraps(func)
        def wrapped_func(*args, **kwargs):
            where = f"{args[0].__class__.__name__}.{func.__name__}"
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
            assert where.endswith("forward")
            return func(*args, **kwargs)

        return wrapped_func

    return wrapper


class WrappedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    @renames_kwarg("past", "cache")
    def forward(self, x, cache=None):
        y = self.proj(x).relu()
        return y if cache is None else y + cache


_WRAPPED = WrappedForward()


def _only_self_varargs(*args):
    return args[0].proj(args[1]).sum(0)


class OnlyVarargs(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    forward = _only_self_varargs


_ONLY_VARARGS = OnlyVarargs()


# ----------------------------------------------------------------------------- static cache


@dataclass(eq=False)
class StaticKV:
    """Preallocated keys/values, written at the decoding position (StaticCache's layout)."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    is_initialized: bool = False

    def lazy_init(self, like: torch.Tensor) -> None:
        self.keys = torch.zeros(B, H, L, D, dtype=like.dtype)
        self.values = torch.zeros(B, H, L, D, dtype=like.dtype)
        self.is_initialized = True

    def update(self, k, v, position):
        if not self.is_initialized:
            self.lazy_init(k)
        self.keys.index_copy_(2, position, k)
        self.values.index_copy_(2, position, v)
        return self.keys, self.values


def _attend(q, keys, values, position):
    # positions after the last written one are masked, as a causal mask over a static cache does
    visible = torch.arange(keys.shape[2]) <= position.max()
    scores = (q @ keys.transpose(-1, -2)) / D**0.5
    scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(-1) @ values


def static_decode_step(q, k, v, cache, position):
    keys, values = cache.update(k, v, position)
    return _attend(q, keys, values, position)


def _static_initialized():
    cache = StaticKV()
    cache.lazy_init(randn(1))
    cache.keys.normal_()
    cache.values.normal_()
    position = torch.randint(1, L, (1,))
    return randn(B, H, 1, D), randn(B, H, 1, D), randn(B, H, 1, D), cache, position


def static_prefill(q, k, v, cache, position):
    keys, values = cache.update(k, v, position)  # creates the cache tensors inside the graph
    return _attend(q, keys, values, position)


def _static_empty():
    q, k, v = randn(B, H, 3, D), randn(B, H, 3, D), randn(B, H, 3, D)
    return q, k, v, StaticKV(), torch.arange(3)


# ----------------------------------------------------------------------------- dynamic cache


@dataclass(eq=False)
class GrowingKV:
    """Keys/values that grow by the new tokens each step (DynamicCache's layout)."""

    keys: torch.Tensor
    values: torch.Tensor

    def update(self, k, v):
        self.keys = torch.cat([self.keys, k], dim=2)
        self.values = torch.cat([self.values, v], dim=2)
        return self.keys, self.values


def growing_decode_step(q, k, v, cache):
    keys, values = cache.update(k, v)
    return ((q @ keys.transpose(-1, -2)) / D**0.5).softmax(-1) @ values


PROGRAMS = [
    Program(_WRAPPED.forward, lambda: (randn(3, 4),), name="varargs_wrapper_bound_method"),
    Program(
        _WRAPPED.forward,
        lambda: (randn(3, 4),),
        kwargs=lambda: {"past": randn(3, 4)},
        name="varargs_wrapper_renamed_kwarg",
    ),
    Program(_WRAPPED, lambda: (randn(3, 4), randn(3, 4)), name="varargs_wrapper_module_call"),
    Program(_ONLY_VARARGS.forward, lambda: (randn(3, 4),), name="varargs_function_as_method"),
    Program(static_decode_step, _static_initialized, name="static_cache_decode_step"),
    Program(static_prefill, _static_empty, name="static_cache_lazy_init_prefill"),
]


@pytest.mark.parametrize("program", PROGRAMS, ids=ids(PROGRAMS))
def test_program(program: Program) -> None:
    run_program(program)


def _decode(step, compiled, backend, caches, steps, graphs_after):
    """Run ``steps`` decoding steps eagerly and compiled on twin caches, comparing each step's
    output and the caches; ``graphs_after[i]`` is the backend call count expected after step i."""
    eager_cache, compiled_cache = caches
    for i in range(steps):
        q, k, v = randn(B, H, 1, D), randn(B, H, 1, D), randn(B, H, 1, D)
        extra = (torch.tensor([3 + i]),) if isinstance(eager_cache, StaticKV) else ()
        expected = step(q, k, v, eager_cache, *extra)
        actual = compiled(q, k, v, compiled_cache, *extra)
        assert_same(actual, expected, rtol=None, atol=None, where=f"step {i}: output")
        assert_same(compiled_cache, eager_cache, rtol=None, atol=None, where=f"step {i}: cache")
        assert backend.calls == graphs_after[i], (
            f"step {i}: {backend.calls} graphs, expected {graphs_after[i]}"
        )


def test_growing_cache_recompiles_once_then_stays_symbolic():
    """Step 0 is captured static, step 1 recompiles with the grown dim symbolic, later steps hit it."""
    torch.manual_seed(0)
    backend = RecordingBackend()
    compiled = compile_with(growing_decode_step, backend)
    start = randn(B, H, 3, D), randn(B, H, 3, D)
    caches = GrowingKV(*start), GrowingKV(*(t.clone() for t in start))
    _decode(
        growing_decode_step, compiled, backend, caches, steps=6, graphs_after=[1, 2, 2, 2, 2, 2]
    )


def test_static_cache_never_recompiles_per_position():
    torch.manual_seed(0)
    backend = RecordingBackend()
    compiled = compile_with(static_decode_step, backend)
    eager_cache = _static_initialized()[3]
    compiled_cache = StaticKV(eager_cache.keys.clone(), eager_cache.values.clone(), True)
    _decode(
        static_decode_step,
        compiled,
        backend,
        (eager_cache, compiled_cache),
        steps=4,
        graphs_after=[1] * 4,
    )


# ----------------------------------------------------------------------------- cache length per prompt


@dataclass(eq=False)
class SizedKV:
    """A static cache whose length is an int attribute (StaticCache's ``max_cache_len``: the prompt
    length plus the new tokens), allocated by the prefill."""

    max_len: int
    keys: torch.Tensor | None = None

    def update(self, k, position):
        if self.keys is None:
            self.keys = torch.zeros(B, H, self.max_len, D)
        self.keys.index_copy_(2, position, k)
        return self.keys


def sized_prefill(q, k, cache, position):
    keys = cache.update(k, position)
    return (q @ keys.transpose(-1, -2)).softmax(-1) @ keys


class ScaledByLength(nn.Module):
    """A module whose int attribute changes between calls: a module setting, not a size."""

    def __init__(self):
        super().__init__()
        self.length = 4

    def forward(self, x):
        return x[:, : self.length] * self.length


def test_int_attribute_of_an_object_becomes_symbolic_once_it_changes():
    """A new prompt length gives the prefill a cache of another length: the first change
    recompiles with the length symbolic (automatic dynamic, as for an int argument), later lengths
    hit that entry. Before, an int read from an object was pinned by value: one prefill graph per
    prompt length. An int attribute of a module stays a constant (TorchDynamo specializes module
    attributes): each value is its own graph."""
    torch.manual_seed(0)
    backend = RecordingBackend()
    compiled = compile_with(sized_prefill, backend)
    for i, (prompt, max_len) in enumerate([(3, 8), (5, 10), (6, 12), (4, 9)]):
        q, k, position = randn(B, H, prompt, D), randn(B, H, prompt, D), torch.arange(prompt)
        eager_cache, compiled_cache = SizedKV(max_len), SizedKV(max_len)
        expected = sized_prefill(q, k, eager_cache, position)
        actual = compiled(q, k, compiled_cache, position)
        assert_same(actual, expected, rtol=1e-5, atol=1e-6, where=f"prompt {prompt}: output")
        assert_same(
            compiled_cache.keys,
            eager_cache.keys,
            rtol=None,
            atol=None,
            where=f"prompt {prompt}: cache",
        )
        assert backend.calls == min(i + 1, 2), f"prompt {prompt}: {backend.calls} graphs"

    module_backend = RecordingBackend()
    module = ScaledByLength()
    compiled = compile_with(module, module_backend)
    for i, length in enumerate((4, 6, 8)):
        module.length = length
        x = randn(3, 10)
        assert_same(compiled(x), module(x), rtol=None, atol=None, where=f"length {length}")
        assert module_backend.calls == i + 1, f"length {length}: {module_backend.calls} graphs"
