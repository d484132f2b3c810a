"""A class's own ``__setattr__`` and ``__getattribute__`` run for every store and read, as in
Python (``variables/objects.py``'s ``inline_user_setattr`` and ``inline_user_getattribute``): on
objects built during capture and on ones that existed before the call, through ``super()`` or
``object.__setattr__`` / ``object.__getattribute__``; a store recorded on an outside object is
replayed once, not through ``__setattr__`` a second time. Before, both were bypassed:
``config.n_layer = 5`` on an aliasing config (transformers' ``attribute_map``) set ``n_layer``,
and reading ``num_layers`` raised AttributeError where eager returns 5; a read of an alias name
found a class attribute of that name, silently not eager's value."""

from __future__ import annotations

import torch
from torchkiln_dynamo_capture import capture
from torchkiln_dynamo_capture.testing import RecordingBackend


class Aliased:
    attribute_map = {"n_layer": "num_layers"}

    def __init__(self, n):
        self.n_layer = n

    def __setattr__(self, key, value):
        if key in type(self).attribute_map:
            key = type(self).attribute_map[key]
        super().__setattr__(key, value)


class Counted:
    """Counts its stores, through ``object.__setattr__`` spelt out."""

    def __init__(self):
        object.__setattr__(self, "stores", 0)

    def __setattr__(self, key, value):
        object.__setattr__(self, "stores", self.stores + 1)
        object.__setattr__(self, key, value)


def _built_inside(x):
    c = Aliased(3)
    c.n_layer = c.num_layers + 2
    return x * c.num_layers


def test_an_object_built_inside_stores_through_its_setattr():
    backend = RecordingBackend()
    captured = capture(_built_inside, backend)
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(captured(x), _built_inside(x))
    assert backend.calls == 1


def test_an_outside_object_stores_through_its_setattr_once():
    def fn(x, obj):
        obj.scale = 2.0
        obj.n_layer = 7
        return x * obj.scale + obj.num_layers

    backend = RecordingBackend()
    captured = capture(fn, backend)
    for _ in range(2):
        x = torch.randn(4)
        got_obj, expected_obj = Counted(), Counted()
        got_alias, expected_alias = Aliased(1), Aliased(1)
        for got, expected in ((got_obj, expected_obj), (got_alias, expected_alias)):
            if isinstance(got, Counted):
                got.num_layers = expected.num_layers = 1
            out = captured(x, got)
            torch.testing.assert_close(out, fn(x, expected))
            assert vars(got) == vars(expected)  # the counter counted each store once


class Mapped:
    """Reads map alias names, as transformers' configs do; a class attribute of the alias's
    name must not be what a read finds."""

    attribute_map = {"alias": "real"}
    alias = 100

    def __init__(self, real):
        self.real = real

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = object.__getattribute__(self, "attribute_map")[key]
        return super().__getattribute__(key)


OUTSIDE = Mapped(7)


def test_a_classes_own_getattribute_runs_for_each_read():
    """Before, a read found the class attribute ``alias`` (100): silently not eager's 7."""

    def outside(x):
        return x * OUTSIDE.alias

    def inside(x):
        m = Mapped(3)
        m.real = m.alias + 1
        return x * m.alias

    captured = {}
    for fn in (outside, inside):
        backend = RecordingBackend()
        captured[fn] = capture(fn, backend)
        for _ in range(2):
            x = torch.randn(4)
            torch.testing.assert_close(captured[fn](x), fn(x))
        assert backend.calls == 1, fn.__name__
    OUTSIDE.real = 9  # the read is guarded: the new value is seen
    x = torch.randn(4)
    torch.testing.assert_close(captured[outside](x), x * 9)
