"""compare_outputs: relative L2 error, max abs error, NaN/Inf counting, shapes, pass/fail."""

from __future__ import annotations

import math

import pytest
import torch

from opbench.measure.check import compare_outputs


def test_identical_outputs_have_zero_error() -> None:
    ref = torch.randn(3, 5, dtype=torch.float64)
    c = compare_outputs(ref.clone(), ref, 1e-4, "float64-cpu")
    assert (c.rel_l2, c.max_abs, c.nonfinite) == (0.0, 0.0, 0)
    assert c.passed and c.tolerance == 1e-4 and c.reference == "float64-cpu"


def test_rel_l2_and_max_abs_values() -> None:
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)  # ||ref|| = 5
    out = torch.tensor([3.0, 4.5], dtype=torch.float32)
    c = compare_outputs(out, ref, 0.2, "float64-cpu")
    assert c.rel_l2 == pytest.approx(0.5 / 5)
    assert c.max_abs == pytest.approx(0.5)
    assert c.passed
    assert not compare_outputs(out, ref, 0.05, "float64-cpu").passed


def test_tolerance_is_inclusive() -> None:
    ref = torch.tensor([1.0, 0.0], dtype=torch.float64)
    out = torch.tensor([1.0, 0.25], dtype=torch.float64)
    assert compare_outputs(out, ref, 0.25, "float64-cpu").passed


def test_low_precision_output_is_compared_in_float64() -> None:
    ref = torch.randn(64, dtype=torch.float64)
    out = ref.to(torch.float16)
    c = compare_outputs(out, ref, 5e-3, "float64-cpu")
    expected = (out.double() - ref).norm().item() / ref.norm().item()
    assert c.rel_l2 == pytest.approx(expected, rel=1e-12)
    assert 0 < c.rel_l2 < 1e-3 and c.passed


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nonfinite_outputs_are_counted_and_fail(bad: float) -> None:
    ref = torch.ones(6, dtype=torch.float64)
    out = torch.ones(6)
    out[1] = bad
    out[4] = bad
    c = compare_outputs(out, ref, 1.0, "float64-cpu")
    assert c.nonfinite == 2
    assert math.isnan(c.rel_l2)
    assert math.isfinite(c.max_abs), "max_abs is taken over the finite elements"
    assert not c.passed


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"\[2, 3\].*\[3, 2\]"):
        compare_outputs(
            torch.zeros(2, 3), torch.zeros(3, 2, dtype=torch.float64), 1e-4, "float64-cpu"
        )


def test_zero_reference() -> None:
    ref = torch.zeros(4, dtype=torch.float64)
    assert compare_outputs(torch.zeros(4), ref, 1e-4, "float64-cpu").rel_l2 == 0.0
    c = compare_outputs(torch.full((4,), 0.5), ref, 1e-4, "float64-cpu")
    assert c.rel_l2 == float("inf") and not c.passed


def test_empty_tensors() -> None:
    c = compare_outputs(
        torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.float64), 1e-4, "float64-cpu"
    )
    assert c.max_abs == 0.0 and c.nonfinite == 0 and c.passed
