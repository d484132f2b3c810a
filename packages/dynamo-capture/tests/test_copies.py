"""``copy.deepcopy`` / ``copy.copy`` of values known at capture time (``variables/copies.py``):
the copy's new containers and objects are built during capture, so mutating them stays in the
graph, a copy that leaves the frame is a new object each call (as eager's), and what the copy
shares with its argument stays the outside object. transformers deep-copies a flat
encoder-decoder config and edits the copy (``delattr``/``setattr``) to take its decoder's half:
BART, T5 and Marian were four graphs."""

from __future__ import annotations

import copy

import pytest
import torch
from torchkiln_dynamo_capture import capture, explain
from torchkiln_dynamo_capture.testing import RecordingBackend


class Config:
    def __init__(self):
        self.scale = 3
        self.decoder_layers = 2
        self.names = {"a": [1, 2]}


CONFIG = Config()
TABLE = {"scale": 2, "layers": [1, 2, 3]}


def _one_graph(fn, *args):
    report = explain(fn)(*args)
    assert report.graph_count == 1 and not report.break_reasons, report
    return report


def test_a_deep_copy_of_an_outside_dict_is_mutated_in_the_graph():
    def fn(x):
        d = copy.deepcopy(TABLE)
        d["extra"] = 5
        d["layers"].append(4)
        return x * d["scale"] + len(d) + len(d["layers"]), d

    _one_graph(fn, torch.randn(3))
    captured = capture(fn, RecordingBackend())
    x = torch.randn(3)
    out, d = captured(x)
    out2, d2 = captured(x)
    torch.testing.assert_close(out, fn(x)[0])
    assert d == {"scale": 2, "layers": [1, 2, 3, 4], "extra": 5} and d2 == d
    assert d is not d2 and d["layers"] is not d2["layers"]  # a new copy each call, as eager's
    assert TABLE == {"scale": 2, "layers": [1, 2, 3]}  # the original untouched


def test_a_deep_copy_of_an_object_is_edited_and_returned_as_eager():
    old, new = "decoder_layers", "num_layers"  # by name, as transformers' loop over keys does

    def fn(x):
        c = copy.deepcopy(CONFIG)
        v = getattr(c, old)
        delattr(c, old)
        setattr(c, new, v)
        c.names["a"].append(3)
        return x * c.num_layers + c.scale, c

    _one_graph(fn, torch.randn(3))
    captured = capture(fn, RecordingBackend())
    x = torch.randn(3)
    (out, c), (out2, c2) = captured(x), captured(x)
    expected, ec = fn(x)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out2, expected)
    assert vars(c) == vars(ec) and not hasattr(c, "decoder_layers")
    assert c is not c2 and c.names is not c2.names
    assert vars(CONFIG) == {"scale": 3, "decoder_layers": 2, "names": {"a": [1, 2]}}


def test_a_shallow_copy_shares_its_items():
    """The copy is new, its items are the argument's: mutating one of them mutates the outside
    list itself, written back after the graph, as eager writes it (before, the copy's items were
    capture's copies of them: the write was lost, silently)."""
    outer = [[1], [2]]

    def fn(x):
        c = copy.copy(outer)
        c.append([3])
        c[0].append(9)
        return x * len(c)

    _one_graph(fn, torch.ones(2))
    outer[:] = [[1], [2]]
    captured = capture(fn, RecordingBackend())
    for calls in (1, 2):
        out = captured(torch.ones(2))
        torch.testing.assert_close(out, torch.full((2,), 3.0))
        assert outer == [[1, *[9] * calls], [2]]


def test_deleting_a_missing_attribute_raises_as_eager():
    missing = "missing"

    def fn(x):
        c = copy.deepcopy(CONFIG)
        delattr(c, missing)
        return x

    with pytest.raises(AttributeError, match="missing"):
        capture(fn, RecordingBackend())(torch.ones(2))


class Aliased:
    """A class's own ``__getattribute__`` that raises AttributeError for a missing name (as
    transformers' configs do): ``hasattr`` is False, in the graph."""

    attribute_map = {"n": "num"}

    def __init__(self):
        self.num = 4

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def test_hasattr_through_a_classes_own_getattribute_and_a_functions_truth():
    def fn(x):
        a = Aliased()
        check = len
        if check and not hasattr(a, "quantization_config") and hasattr(a, "n"):
            return x * a.n
        return x

    _one_graph(fn, torch.randn(3))
    x = torch.randn(3)
    torch.testing.assert_close(capture(fn, RecordingBackend())(x), x * 4)


def test_the_dict_of_an_object_built_during_capture_is_its_own():
    """``vars(copy)`` reads the copy's attributes, follows later stores, and handed back to
    Python (returned, or at a graph break for a write through it) is the copy's own
    ``__dict__``, not a copy of it."""

    def returned(x):
        c = copy.deepcopy(CONFIG)
        d = vars(c)
        c.scale = 7  # a store after the read shows through the dict, as in eager
        return x * d["scale"], d, c

    out, d, c = capture(returned, RecordingBackend())(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 7.0))
    assert d is c.__dict__ and d["scale"] == 7

    def written(x):
        c = copy.deepcopy(CONFIG)
        c.__dict__["extra"] = 2
        return x + c.extra

    torch.testing.assert_close(
        capture(written, RecordingBackend())(torch.ones(2)), torch.full((2,), 3.0)
    )
