"""A class's own ``__setattr__`` runs for every store, as in Python (``variables/objects.py``'s
``inline_user_setattr``): on objects built during capture and on ones that existed before the
call, through ``super().__setattr__`` or ``object.__setattr__``; a store recorded on an outside
object is replayed once, not through ``__setattr__`` a second time. Before, stores bypassed it:
``config.n_layer = 5`` on an aliasing config (transformers' ``attribute_map``) set ``n_layer``,
and reading ``num_layers`` raised AttributeError where eager returns 5."""

from __future__ import annotations

import torch
from torchkiln_dynamo_capture import capture


class Counting:
    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


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
    backend = Counting()
    captured = capture(_built_inside, backend)
    for _ in range(2):
        x = torch.randn(4)
        torch.testing.assert_close(captured(x), _built_inside(x))
    assert backend.graphs == 1


def test_an_outside_object_stores_through_its_setattr_once():
    def fn(x, obj):
        obj.scale = 2.0
        obj.n_layer = 7
        return x * obj.scale + obj.num_layers

    backend = Counting()
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
