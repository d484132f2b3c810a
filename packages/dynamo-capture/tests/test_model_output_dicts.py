"""transformers' ``ModelOutput`` (an OrderedDict subclass dataclass) as SegFormer's backbone and
``capture_outputs`` use it, each in one graph and against eager:

- a ModelOutput from outside (the value an earlier graph returned) read through ``.items()``,
  ``.keys()``, ``.values()``, ``len`` and iteration: a snapshot of its items, guarded by its keys
  (``UserObjectVariable.call_method``); before, iterating the ``odict_items`` view made the whole
  frame run eagerly;
- ``outputs["hidden_states"] = ...`` on one built during capture (its ``__setitem__`` sets the
  key and the attribute); before, ``OrderedDict.__setitem__`` on it broke the graph; a store that
  would put the keys out of field order (or set a key to None) breaks the graph and stays right;
- ``all_hidden_states = (); all_hidden_states += (h,)``: a constant tuple plus a tuple of
  tensors (before: a graph break);
- a helper that captures no operation and recompiles per module (transformers'
  ``recursively_install_hooks``) runs eagerly past the recompile limit without a warning: it
  loses nothing.

The imitation below keeps transformers' semantics that matter here (keys are the fields that are
not None, in the order they were set; ``__setitem__`` and ``__setattr__`` keep the key and the
attribute together; ``__getitem__`` by name or position)."""

from __future__ import annotations

import dataclasses
import warnings
from collections import OrderedDict

import pytest
import torch
from torchkiln_dynamo_capture import RecompileLimitExceeded, capture
from torchkiln_dynamo_capture.testing import RecordingBackend


class ModelOutput(OrderedDict):
    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __getitem__(self, k):
        if isinstance(k, str):
            return dict(self.items())[k]
        return self.to_tuple()[k]

    def __setattr__(self, name, value):
        if name in {f.name for f in dataclasses.fields(self)} and value is not None:
            super().__setitem__(name, value)
        super().__setattr__(name, value)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        super().__setattr__(key, value)

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@dataclasses.dataclass
class EncoderOutput(ModelOutput):
    last_hidden_state: torch.Tensor = None
    hidden_states: tuple = None
    attentions: tuple = None


def _drop_hidden_states(out):
    # transformers' backbone wrapper: the output rebuilt without hidden_states
    kept = {k: v * 2 for k, v in out.items() if k != "hidden_states"}
    n = len(out) + len(list(out.keys())) + len(out.values())
    return type(out)(**kept), [k for k in out], n


def test_an_outside_model_output_is_read_through_its_items_in_one_graph():
    backend = RecordingBackend()
    captured = capture(_drop_hidden_states, backend)
    for _ in range(2):
        out = EncoderOutput(last_hidden_state=torch.randn(3), hidden_states=(torch.randn(2),))
        got, want = captured(out), _drop_hidden_states(out)
        torch.testing.assert_close(got[0].last_hidden_state, want[0].last_hidden_state)
        assert list(got[0].keys()) == list(want[0].keys()) == ["last_hidden_state"]
        assert got[1:] == want[1:]
    assert backend.calls == 1
    # other keys: the guard on them recaptures, and the result follows the new keys
    out = EncoderOutput(last_hidden_state=torch.randn(3), attentions=(torch.randn(2),))
    got, want = captured(out), _drop_hidden_states(out)
    assert list(got[0].keys()) == list(want[0].keys()) == ["last_hidden_state", "attentions"]
    torch.testing.assert_close(got[0].attentions, want[0].attentions)
    assert got[1:] == want[1:]
    assert backend.calls == 2


def _collect(x):
    all_hidden = ()
    h = x
    for _ in range(2):
        h = h.sin()
        all_hidden += (h,)
    all_hidden = (x,) + all_hidden + ()
    out = EncoderOutput(last_hidden_state=h)
    out["hidden_states"] = all_hidden
    return out.to_tuple(), out[1], list(out.keys()), out


def test_a_model_output_built_inside_takes_stores_in_one_graph():
    backend = RecordingBackend()
    captured = capture(_collect, backend)
    for _ in range(2):
        x = torch.randn(4)
        got, want = captured(x), _collect(x)
        torch.testing.assert_close(got[:2], want[:2])
        assert got[2] == want[2] == ["last_hidden_state", "hidden_states"]
        assert list(got[3].keys()) == list(want[3].keys())
        torch.testing.assert_close(got[3].hidden_states, want[3].hidden_states)
    assert backend.calls == 1


def _out_of_field_order(x):
    out = EncoderOutput(last_hidden_state=x + 1, attentions=(x * 2,))
    out["hidden_states"] = (x * 3,)  # after attentions in the dict, before it in the fields
    return out.to_tuple(), list(out.keys())


def _key_set_to_none(x):
    out = EncoderOutput(last_hidden_state=x + 1, attentions=(x * 2,))
    out.attentions = None  # the key keeps its value; the attribute is None
    return out.to_tuple(), out.attentions is None, list(out.keys())


@pytest.mark.parametrize("fn", [_out_of_field_order, _key_set_to_none])
def test_stores_that_leave_field_order_break_the_graph_and_stay_right(fn):
    captured = capture(fn, RecordingBackend())
    for _ in range(2):
        x = torch.randn(4)
        got, want = captured(x), fn(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]


def _install(module):
    # no tensor operation: the hook registration breaks the graph, module by module
    for child in module.children():
        _install(child)
    module.register_forward_hook(lambda m, a, o: None)


def test_a_helper_with_no_operation_past_the_recompile_limit_runs_eagerly_quietly():
    net = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.ReLU()) for _ in range(6)])
    captured = capture(_install, RecordingBackend(), recompile_limit=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitExceeded)
        for m in net:
            captured(m)
    # every module got its hook, as eagerly
    assert [len(m._forward_hooks) for c in net for m in c.modules()] == [1] * 12
