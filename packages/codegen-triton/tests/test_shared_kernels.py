"""Kernels named from their text (``_naming.py``): launch sites of identical code share one
module and one ``JITFunction`` (and compute what eager computes); a constant or a dtype apart,
they do not. ``precompile``'s dedupe of those shared functions is in test_precompile.py."""

from __future__ import annotations

import pytest
import torch
from _specs import buf, spec
from torchkiln_codegen_triton import TritonBackend, kernel_source
from torchkiln_codegen_triton._naming import PLACEHOLDER
from torchkiln_loop_ir.ops import ops


def _scale(name, n, factor=2.0, dtype=torch.float32):
    def body(x, r):
        ops.store("out", x[0], ops.mul(ops.load("a", x[0]), ops.constant(factor, dtype)))

    return spec(
        name,
        (n,),
        (),
        [("loop", [("out", body, False)])],
        [buf("a", dtype, (n,)), buf("out", dtype, (n,))],
        ["a"],
        ["out"],
    )


def _row_max(name, n, m):
    def body(x, r):
        v = ops.load("a", x[0] * m + r[0])
        ops.store_reduction("out", x[0], ops.reduction(torch.float32, torch.float32, "max", v))

    return spec(
        name,
        (n,),
        (m,),
        [("loop", [("out", body, True)])],
        [buf("a", torch.float32, (n, m)), buf("out", torch.float32, (n,))],
        ["a"],
        ["out"],
    )


def test_launch_sites_of_identical_code_share_one_function_and_compute_eager():
    specs = [_scale("kernel3", 37), _row_max("kernel4", 6, 29), _scale("kernel17", 37)]
    specs += [_row_max("kernel18", 6, 29)]
    k3, k4, k17, k18 = TritonBackend().compile_kernels(specs)
    # the launch sites keep their names; the function is named from the text
    assert [k.name for k in (k3, k4, k17, k18)] == ["kernel3", "kernel4", "kernel17", "kernel18"]
    assert k3.function_name == k17.function_name and k3.function_name.startswith("tk_poi_")
    assert k4.function_name == k18.function_name and k4.function_name.startswith("tk_per_")
    assert k3.path == k17.path and k3._fn is k17._fn and k4._fn is k18._fn
    assert k3._fn is not k4._fn and k3.path != k4.path
    assert f"def {k3.function_name}(" in k3.source and PLACEHOLDER not in k3.source
    assert "kernel3" not in k3.source and "kernel17" not in k17.source
    assert kernel_source(_scale("another_site", 37)) == k3.source
    for k in (k3, k17):
        a, out = torch.randn(37), torch.empty(37)
        k(a, out)
        torch.testing.assert_close(out, a * 2)
    for k in (k4, k18):
        a, out = torch.randn(6, 29), torch.empty(6)
        k(a, out)
        torch.testing.assert_close(out, a.amax(1))


@pytest.mark.parametrize(
    "other",
    [
        _scale("k_b", 37, factor=3.0),  # another constant
        _scale("k_b", 37, dtype=torch.float64),  # another dtype
    ],
    ids=["constant", "dtype"],
)
def test_kernels_differing_in_a_constant_or_a_dtype_are_not_merged(other):
    base, diff = TritonBackend().compile_kernels([_scale("k_a", 37), other])
    assert base.function_name != diff.function_name
    assert base.path != diff.path and base._fn is not diff._fn
    dtype = other.buffers["a"].dtype
    factor = 3.0 if dtype == torch.float32 else 2.0
    a, out = torch.randn(37, dtype=dtype), torch.empty(37, dtype=dtype)
    diff(a, out)
    torch.testing.assert_close(out, a * factor)
    a32, out32 = torch.randn(37), torch.empty(37)
    base(a32, out32)
    torch.testing.assert_close(out32, a32 * 2)


def test_exported_kernels_load_with_their_shared_function_and_old_entries_by_spec_name():
    backend = TritonBackend()
    specs = [_scale("kernel1", 37), _scale("kernel2", 37)]
    k1, k2 = backend.compile_kernels(specs)
    saved = backend.export_kernels([k1, k2])
    assert [s["function"] for s in saved] == [k1.function_name, k2.function_name]
    l1, l2 = backend.load_kernels(saved, specs)
    assert l1._fn is k1._fn and l2._fn is k1._fn
    # an entry saved before functions were named from their text: the spec's name, no "function"
    old_source = k1.source.replace(k1.function_name, "kernel1")
    (old,) = backend.load_kernels([{"source": old_source, "config": k1.config}], specs[:1])
    assert old.function_name == "kernel1" and old._fn is not k1._fn
    a, out = torch.randn(37), torch.empty(37)
    old(a, out)
    torch.testing.assert_close(out, a * 2)
