"""Sizes that must stay symbolic under ``dynamic=True`` (issue 15): the size arithmetic transformers'
BERT, GPT-2 and DistilBERT forwards do on the sequence length, one program per pattern.

Each program is captured with ``dynamic=True, fullgraph=True`` and called at sequence lengths 8, 12,
16 and 24 with fresh inputs: outputs equal eager at every length and the backend is called once in
all (one graph serves every length). A program that read a size as a Python int would guard on it
and recompile per length. The expected counts were checked against TorchDynamo
(``TORCHKILN_CONFORMANCE_PEER=dynamo``: ``torch.compile(dynamic=True, fullgraph=True)``), which gives
one graph for each program here too.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _conformance_harness import PEER, RecordingBackend, assert_same, randn

LENGTHS = (8, 12, 16, 24)
B, H, D = 2, 2, 5  # no input dim equals a length: TorchDynamo duck-sizes equal sizes together
C = H * D


def split_heads_size_tuple(x):
    # GPT-2's Conv1D and attention: `x.size()[:-1] + (n,)`, a torch.Size slice plus a tuple
    shape = x.size()[:-1] + (H, D)
    return x.view(shape).transpose(1, 2).sum(-1)


def merge_heads_size_tuple(x):
    q = x.view(x.size()[:-1] + (H, D)).permute(0, 2, 1, 3)
    merged = q.permute(0, 2, 1, 3).contiguous()
    return merged.view(merged.size()[:-2] + (H * D,)) * 2


def view_with_unpacked_sizes(x):
    # DistilBERT: `bs, q_length, dim = query.size()` then `.view(bs, -1, n_heads, dim_per_head)`
    bs, q_length, dim = x.size()
    h = x.view(bs, -1, H, dim // H).transpose(1, 2)
    return h.transpose(1, 2).reshape(bs, q_length, dim) + 1


def arange_position_ids(x):
    # DistilBERT/GPT-2: position ids from `torch.arange(seq_length)`
    seq_length = x.size(1)
    positions = torch.arange(seq_length, dtype=torch.long, device=x.device)
    return x + positions.unsqueeze(0).unsqueeze(-1).float()


class BufferSlice(torch.nn.Module):
    """BERT: a registered `position_ids` buffer sliced to the input's length."""

    def __init__(self):
        super().__init__()
        self.register_buffer("position_ids", torch.arange(64).expand((1, -1)), persistent=False)
        self.embed = torch.nn.Embedding(64, C)

    def forward(self, x):
        seq_length = x.size()[1]
        position_ids = self.position_ids[:, 0:seq_length]
        return x + self.embed(position_ids)


_BUFFER_SLICE = BufferSlice()


def padding_mask_to_additive(x, mask):
    # BERT's extended mask: `mask[:, None, None, :]`, `(1.0 - m) * finfo.min`
    extended = mask[:, None, None, :].to(x.dtype)
    extended = (1.0 - extended) * torch.finfo(x.dtype).min
    scores = x.view(B, -1, H, D).transpose(1, 2) @ x.view(B, -1, H, D).permute(0, 2, 3, 1)
    return (scores + extended).softmax(-1)


def causal_mask_from_arange(x):
    # the causal mask built by comparing two aranges of the symbolic length
    n = x.shape[1]
    idx = torch.arange(n, device=x.device)
    causal = idx[None, :] <= idx[:, None]
    scores = (x @ x.transpose(-1, -2)) / math.sqrt(x.size(-1))
    return scores.masked_fill(~causal, torch.finfo(x.dtype).min).softmax(-1)


def causal_mask_tril(x):
    n = x.size(1)
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool, device=x.device))
    scores = x @ x.transpose(-1, -2)
    return scores.masked_fill(~causal, -1e9).softmax(-1)


def expand_mask_to_scores(x, mask):
    # DistilBERT: `mask.view(bs, 1, 1, k_length).expand_as(scores)`
    bs, k_length = mask.shape
    q = x.view(bs, -1, H, D).transpose(1, 2)
    scores = q @ q.transpose(2, 3)
    expanded = (mask == 0).view(bs, 1, 1, k_length).expand_as(scores)
    return scores.masked_fill(expanded, torch.finfo(scores.dtype).min).softmax(-1)


def sdpa_with_symbolic_mask(x, mask):
    q = x.view(B, -1, H, D).transpose(1, 2)
    attn_mask = mask[:, None, None, :].bool().expand(-1, 1, q.size(2), -1)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=attn_mask)
    return out.transpose(1, 2).reshape(B, -1, C)


def size_arithmetic_scale(x):
    # a size used in arithmetic and handed to a torch op stays a SymInt
    n = x.size(1)
    return x / (n * 2) + torch.full((1, n, 1), 1.0) * (n - 1)


def branch_on_size_comparison(x):
    # a comparison of the size with a constant is a guard on a range, not on the value
    if x.size(1) > 4:
        return x * 2
    return x - 1


def clamp_length_with_min(x):
    # `min(seq_len, max_positions)`: a SymInt min, kept symbolic
    n = min(x.size(1), 64)
    return x[:, :n] + torch.arange(n).view(1, -1, 1)


def slice_with_size_arithmetic(x):
    n = x.shape[1]
    return x[:, 1:] - x[:, : n - 1]


def new_zeros_of_symbolic_length(x):
    pad = x.new_zeros(x.size(0), x.size(1) // 2, x.size(2))
    return torch.cat([x, pad], dim=1).cumsum(1)


def range_over_length(x):
    # unrolling `range(n)` needs n's value: both peers guard on it, one graph per length
    out = x[:, 0]
    for i in range(1, x.size(1)):
        out = out + x[:, i]
    return out


_BY_LENGTH = {length: 1.0 + length / 8 for length in (8, 12, 16, 24)}


def dict_keyed_by_length(x):
    # a size as a dict key is a Python int: both peers specialise it, one graph per length
    scale = _BY_LENGTH[x.size(1)]
    return x * scale


def slice_to_min_of_length_and_cap(x):
    # `x[:, :min(seq_len, cap)]` with lengths on both sides of the cap: the slice is symbolic
    # (sym_min), but the elementwise op after it asks whether the slice is contiguous, which is
    # `seq_len == min(seq_len, cap)`: one recompile when the length passes the cap, in TorchDynamo
    # too (a guard from torch's own check_contiguous_sizes_strides), and none after
    return x[:, : min(x.size(1), 12)] * 2


@torch.compiler.disable
def _runs_in_python(t):
    return t + 0


def size_across_a_graph_break(x):
    # `s = x.shape` read before a graph break and used after it: the continuation receives a
    # torch.Size (and an int); automatic dynamic shapes make the items that changed symbolic
    s = x.shape
    n = x.size(1)
    y = _runs_in_python(x.sin())
    return y.view(s[0], s[1], H, -1).sum(-1) * n + s[2]


def sizes_tuple_across_a_graph_break(x):
    b, length = x.size(0), x.size(1)
    y = _runs_in_python(x.cos())
    return y.reshape(b * length, -1)[: length + 1] - length


def _x(length):
    return (randn(B, length, C),)


def _x_mask(length):
    mask = torch.ones(B, length, dtype=torch.long)
    mask[1, length // 2 :] = 0
    return randn(B, length, C), mask


PROGRAMS = [
    (split_heads_size_tuple, _x),
    (merge_heads_size_tuple, _x),
    (view_with_unpacked_sizes, _x),
    (arange_position_ids, _x),
    (_BUFFER_SLICE, _x),
    (padding_mask_to_additive, _x_mask),
    (causal_mask_from_arange, _x),
    (causal_mask_tril, _x),
    (expand_mask_to_scores, _x_mask),
    (sdpa_with_symbolic_mask, _x_mask),
    (size_arithmetic_scale, _x),
    (branch_on_size_comparison, _x),
    (clamp_length_with_min, _x),
    (slice_with_size_arithmetic, _x),
    (new_zeros_of_symbolic_length, _x),
]

# Programs that need a size's value: TorchDynamo specialises them too (one graph per length), and
# torchkiln must not do worse.
SPECIALISING = [(range_over_length, _x), (dict_keyed_by_length, _x)]
# lengths 8, 12 | 16, 24 on either side of a cap of 12: one recompile (both peers)
PASSING_A_CAP = [(slice_to_min_of_length_and_cap, _x)]
# a graph break with sizes handed to the continuation, default (automatic) dynamic shapes: two
# frames captured static at length 8, both recompiled once at 12 with the length symbolic, then
# reused (TorchDynamo: the same counts); before, the continuation recompiled at every length
ACROSS_A_BREAK = [(size_across_a_graph_break, _x), (sizes_tuple_across_a_graph_break, _x)]


def _name(program):
    fn = program[0]
    return getattr(fn, "__name__", None) or type(fn).__name__


def _compile_dynamic(fn, backend):
    if PEER == "dynamo":  # the reference peer, never used by default
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(fn, backend=backend, fullgraph=True, dynamic=True)
    from torchkiln_dynamo_capture import capture

    return capture(fn, backend, fullgraph=True, dynamic=True)


def _compile_automatic(fn, backend):
    if PEER == "dynamo":  # the reference peer, never used by default
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(fn, backend=backend)
    from torchkiln_dynamo_capture import capture

    return capture(fn, backend)


def _run_lengths(program, graphs_after, compile_fn=None):
    fn, make_inputs = program
    torch.manual_seed(0)
    backend = RecordingBackend()
    compiled = (compile_fn or _compile_dynamic)(fn, backend)
    for i, length in enumerate(LENGTHS):
        inputs = make_inputs(length)
        expected = fn(*inputs)
        actual = compiled(*inputs)
        assert_same(actual, expected, rtol=None, atol=None, where=f"length {length}")
        assert backend.calls == graphs_after[i], (
            f"length {length}: {backend.calls} graphs, expected {graphs_after[i]}"
        )
    again = make_inputs(LENGTHS[0])  # the first length hits its entry again
    assert_same(compiled(*again), fn(*again), rtol=None, atol=None, where="first length again")
    assert backend.calls == graphs_after[-1], "the first length recompiled"


@pytest.mark.parametrize("program", PROGRAMS, ids=[_name(p) for p in PROGRAMS])
def test_one_graph_for_every_sequence_length(program):
    _run_lengths(program, [1] * len(LENGTHS))


@pytest.mark.parametrize("program", SPECIALISING, ids=[_name(p) for p in SPECIALISING])
def test_value_of_size_needed_one_graph_per_length(program):
    _run_lengths(program, list(range(1, len(LENGTHS) + 1)))


@pytest.mark.parametrize("program", PASSING_A_CAP, ids=[_name(p) for p in PASSING_A_CAP])
def test_length_passing_a_cap_recompiles_once(program):
    _run_lengths(program, [1, 1, 2, 2])


@pytest.mark.parametrize("program", ACROSS_A_BREAK, ids=[_name(p) for p in ACROSS_A_BREAK])
def test_sizes_across_a_graph_break_stay_symbolic(program):
    _run_lengths(program, [2, 4, 4, 4], compile_fn=_compile_automatic)
