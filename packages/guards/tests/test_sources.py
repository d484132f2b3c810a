"""Sources print as the expression a user would write, and fetch the value it names."""

import torch
from torchkiln_guards import (
    AttrSource,
    ClosureSource,
    ConstantMatch,
    GlobalSource,
    ItemSource,
    LocalSource,
    ModuleTrainingMatch,
    SizeSource,
)

config = type("Config", (), {"use_cache": True})()


def test_source_expressions():
    assert LocalSource("x").expr() == "L['x']"
    assert GlobalSource("cfg").expr() == "G['cfg']"
    assert ClosureSource("n").expr() == "C['n']"
    assert SizeSource(LocalSource("x"), 0).expr() == "L['x'].size()[0]"
    assert AttrSource(GlobalSource("config"), "use_cache").expr() == "G['config'].use_cache"
    layer = ItemSource(AttrSource(LocalSource("self"), "layers"), 3)
    assert AttrSource(layer, "training").expr() == "L['self'].layers[3].training"
    assert ItemSource(LocalSource("d"), "k").expr() == "L['d']['k']"
    assert str(LocalSource("x")) == "L['x']"
    assert layer.root() == LocalSource("self")


def test_sources_are_hashable_values():
    a = AttrSource(LocalSource("self"), "w")
    assert a == AttrSource(LocalSource("self"), "w")
    assert len({a, AttrSource(LocalSource("self"), "w")}) == 1


def test_global_attr_chain_read_live(h):
    def f(x):
        return x

    cg = h.build(f, [ConstantMatch(AttrSource(GlobalSource("config"), "use_cache"), True)])
    x = torch.randn(3)
    h.expect_pass(cg, x)
    config.use_cache = False
    try:
        h.expect_fail(cg, "G['config'].use_cache: expected True, got False", x)
    finally:
        config.use_cache = True
    h.expect_pass(cg, x)


def test_module_list_item_attr(h):
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(4)])

    def forward(self, x):
        return x

    src = AttrSource(ItemSource(AttrSource(LocalSource("self"), "layers"), 3), "training")
    cg = h.build(
        forward,
        [ModuleTrainingMatch(ItemSource(AttrSource(LocalSource("self"), "layers"), 3), True)],
    )
    x = torch.randn(2)
    h.expect_pass(cg, model, x)
    model.layers[3].eval()
    h.expect_fail(cg, f"{src.expr()}: expected True, got False", model, x)
    # a list too short to have item 3: the guard fails, it does not raise
    model.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    failure = h.expect_fail(cg, None, model, x)
    assert failure.expr == "L['self'].layers[3]"
    assert "IndexError" in str(failure)


def test_closure_source_reads_current_cell_contents(h):
    scale = 2

    def f(x):
        return x * scale

    cg = h.build(f, [ConstantMatch(ClosureSource("scale"), 2)])
    x = torch.randn(4)
    torch.testing.assert_close(f(x), x * 2)
    h.expect_pass(cg, x)
    scale = 3
    h.expect_fail(cg, "C['scale']: expected 2, got 3", x)
