"""gc_freeze.py: a compile's garbage collections skip the heap that was there before it; the
freeze is undone after (also on an error), nested compiles and a caller's own freeze are left
alone, and a training step compiled under it equals eager."""

import gc

import pytest
import torch
import torchkiln
from torchkiln.gc_freeze import frozen_heap


@pytest.fixture(autouse=True)
def _nothing_frozen():
    gc.unfreeze()  # a test process that froze objects would make every check below moot
    yield
    assert gc.get_freeze_count() == 0


def test_objects_alive_on_entry_are_frozen_and_given_back():
    alive = [object() for _ in range(100)]
    with frozen_heap():
        assert gc.get_freeze_count() >= len(alive)
        with frozen_heap():  # nested: the outer one unfreezes, once
            assert gc.get_freeze_count() >= len(alive)
        assert gc.get_freeze_count() >= len(alive)
    assert gc.get_freeze_count() == 0


def test_unfrozen_after_an_error():
    with pytest.raises(ValueError, match="inside"), frozen_heap():
        raise ValueError("inside")
    assert gc.get_freeze_count() == 0


def test_a_callers_own_freeze_is_kept():
    """The caller's frozen objects stay frozen. The count itself may drop a little meanwhile
    (a frozen object freed by its refcount leaves the permanent generation), so the check
    is on an object the test keeps alive: collections do not see it (gc.get_objects lists
    generations 0-2 only)."""
    kept = [object()]  # a tracked container
    gc.freeze()
    try:
        with frozen_heap():
            pass
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())


def test_a_training_step_compiles_under_the_freeze_and_matches_eager(monkeypatch, tmp_path):
    """The backend and the backward's later compile run with the heap frozen; gradients equal
    eager's."""
    # a code cache of its own: a graph another test compiled into a shared cache (the GPU
    # machine's run sets one for the whole suite) would be loaded, not compiled, under the freeze
    monkeypatch.setenv("TORCHKILN_CACHE_DIR", str(tmp_path))
    seen = []
    real = torchkiln.pipeline.frozen_heap

    def spy():
        seen.append(gc.get_freeze_count() == 0)
        return real()

    monkeypatch.setattr(torchkiln.pipeline, "frozen_heap", spy)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    compiled = torchkiln.compile(model, options={"strict": True})
    out = compiled(x)
    out.square().mean().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected_out = model(x)
    expected_out.square().mean().backward()
    torch.testing.assert_close(out, expected_out)
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    # the backend, then the forward's and (at backward) the backward's compile; the outermost
    # of each froze the heap
    assert len(seen) >= 3 and seen[0] and seen[-1], seen
