import pytest
import torch
from torchkiln.bench import accuracy


def _case(n: int, eager_err: float, compiled_err: float, dtype=torch.float32):
    ref = torch.randn(n, dtype=torch.float64)
    # A constant offset of e gives an RMSE of exactly e.
    return ref + compiled_err, ref + eager_err, ref


def test_rmse_known_value() -> None:
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b = torch.tensor([1.0, 2.0, 3.0, 6.0])
    assert accuracy.rmse(a, b) == pytest.approx(1.0)  # sqrt(4 / 4)


def test_two_x_rule_for_ordinary_tensors() -> None:
    assert accuracy.compare(*_case(100, 1e-3, 1.9e-3), torch.float32).passed
    verdict = accuracy.compare(*_case(100, 1e-3, 2.5e-3), torch.float32)
    assert not verdict.passed and "rmse" in verdict.detail and verdict.text == "fail"


def test_three_x_rule_for_tiny_tensors() -> None:
    assert accuracy.compare(*_case(10, 1e-3, 2.5e-3), torch.float32).passed
    assert not accuracy.compare(*_case(10, 1e-3, 3.5e-3), torch.float32).passed
    assert not accuracy.compare(*_case(11, 1e-3, 2.5e-3), torch.float32).passed


def test_dtype_tolerance_floor() -> None:
    # eager exactly equal to the reference: only the floor remains.
    assert accuracy.compare(*_case(100, 0.0, 5e-6), torch.float32).passed
    assert not accuracy.compare(*_case(100, 0.0, 5e-5), torch.float32).passed
    assert accuracy.compare(*_case(100, 0.0, 5e-3), torch.bfloat16).passed
    assert accuracy.compare(*_case(100, 0.0, 5e-3), torch.float16).passed
    assert not accuracy.compare(*_case(100, 0.0, 5e-2), torch.bfloat16).passed


def test_nan_shape_and_integer_outputs() -> None:
    ref = torch.randn(20, dtype=torch.float64)
    bad = ref.float().clone()
    bad[3] = float("nan")
    assert not accuracy.compare(bad, ref.float(), ref, torch.float32).passed
    assert not accuracy.compare(
        torch.zeros(3), torch.zeros(4), torch.zeros(4), torch.float32
    ).passed
    ints = torch.arange(5)
    assert accuracy.compare(ints, ints.clone(), ints.clone(), torch.float32).passed
    assert not accuracy.compare(ints + 1, ints, ints, torch.float32).passed


def test_nested_outputs_and_fp64_copy() -> None:
    model = torch.nn.Linear(4, 3)
    x, ids = torch.randn(2, 4), torch.arange(3)
    model64, (x64, ids64) = accuracy.fp64_copy(model, (x, ids))
    assert model64.weight.dtype == torch.float64 and model.weight.dtype == torch.float32
    assert x64.dtype == torch.float64 and ids64.dtype == torch.int64
    out = {"a": model(x), "b": (model(x) * 2,)}
    ref = {"a": model64(x64), "b": (model64(x64) * 2,)}
    assert len(accuracy.flatten_outputs(out)) == 2
    assert accuracy.compare(out, out, ref, torch.float32).passed
