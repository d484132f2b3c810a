"""Options that were removed because nothing read them are still accepted, with a warning."""

import dataclasses

import pytest
import torchkiln_loop_ir as L


def test_loop_ir_options_autotune_is_deprecated_and_not_a_field():
    with pytest.warns(DeprecationWarning, match="autotune"):
        opts = L.LoopIROptions(autotune=True, max_fusions=2)
    assert opts == L.LoopIROptions(max_fusions=2)  # it changes nothing
    assert "autotune" not in {f.name for f in dataclasses.fields(L.LoopIROptions)}


def test_capabilities_indirect_store_atomic_add_is_deprecated():
    with pytest.warns(DeprecationWarning, match="indirect_store_atomic_add"):
        caps = L.BackendCapabilities(True, max_reduction_stages=8, indirect_store_atomic_add=True)
    assert caps == L.BackendCapabilities(True, max_reduction_stages=8)
