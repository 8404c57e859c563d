"""compare_outputs: relative L2 error, max abs error, NaN/Inf counting, shapes, pass/fail."""

from __future__ import annotations

import math

import pytest
import torch

from opbench.measure.check import MAX_ABS_SCALE, compare_outputs
from opbench.measure.poison import poison_, poison_free_memory, scrub, unwritten


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


# ---- the element-wise limit ---------------------------------------------------------------------


def test_max_abs_limit_is_the_tolerance_times_the_largest_reference_value() -> None:
    ref = torch.tensor([0.5, -4.0, 2.0], dtype=torch.float64)
    c = compare_outputs(ref.clone(), ref, 1e-3, "float64-cpu")
    assert c.max_abs_limit == pytest.approx(MAX_ABS_SCALE * 1e-3 * 4.0)
    assert c.passed and c.failures == ()


def test_a_few_wild_elements_fail_on_max_abs_though_rel_l2_hides_them() -> None:
    ref = torch.randn(200_000, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = ref.clone()
    out[123] += 0.5  # one element off by ~10% of the largest value
    c = compare_outputs(out, ref, 5e-3, "float64-cpu")
    assert c.rel_l2 < 5e-3, "relative L2 alone would pass it"
    assert c.max_abs == pytest.approx(0.5) and c.max_abs > c.max_abs_limit
    assert not c.passed
    assert c.failures == (f"max_abs 5.0e-01 > {c.max_abs_limit:.1e}",)


def test_rel_l2_failure_says_so() -> None:
    ref = torch.ones(4, dtype=torch.float64)
    c = compare_outputs(torch.full((4,), 1.01), ref, 1e-3, "float64-cpu")
    assert "rel_l2 1.0e-02 > 1.0e-03" in c.failures and not c.passed


def test_loose_tolerance_is_carried() -> None:
    ref = torch.ones(3, dtype=torch.float64)
    assert compare_outputs(
        ref.clone(), ref, 0.05, "float64-cpu", loose_tolerance=True
    ).loose_tolerance


# ---- poison and unwritten elements ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_poison_is_a_nan_that_arithmetic_does_not_produce(dtype: torch.dtype) -> None:
    t = poison_(torch.zeros(5, dtype=dtype))
    assert torch.isnan(t).all() and unwritten(t) == 5
    one = torch.ones(1, dtype=dtype)
    zero = torch.zeros(1, dtype=dtype)
    inf = torch.full((1,), float("inf"), dtype=dtype)
    computed = torch.cat(
        [
            zero / zero,
            inf - inf,
            torch.full((1,), float("nan"), dtype=dtype),
            -one.sqrt() * float("nan"),
        ]
    )
    assert torch.isnan(computed).all() and unwritten(computed) == 0


def test_poison_reaches_every_element_of_a_strided_tensor() -> None:
    base = torch.zeros(6, 8, dtype=torch.float16)
    view = base.t()[::2]  # not contiguous
    poison_(view)
    assert unwritten(view) == view.numel() == unwritten(base)


def test_integer_outputs_are_poisoned_with_the_dtype_maximum() -> None:
    t = poison_(torch.zeros(4, dtype=torch.int32))
    assert t.tolist() == [2**31 - 1] * 4 and unwritten(t) == 4


def test_unwritten_elements_are_counted_and_fail() -> None:
    ref = torch.randn(10, dtype=torch.float64)
    out = poison_(torch.empty(10, dtype=torch.float16))
    out[:7] = ref[:7].to(torch.float16)
    c = compare_outputs(out, ref, 5e-3, "float64-cpu")
    assert c.unwritten == 3 and c.nonfinite == 3 and not c.passed
    assert c.failures == ("3 of 10 elements never written",)


def test_scrub_poisons_an_output_but_not_a_view_of_the_input() -> None:
    x = torch.randn(3, 4)
    out = torch.relu(x)
    scrub(out, spare=x)
    assert unwritten(out) == out.numel()
    flat = x.view(-1)
    scrub(flat, spare=x)
    assert unwritten(x) == 0, (
        "flatten returns a view of the input: scrubbing it would poison the input"
    )


def test_the_cpu_has_no_allocator_cache_to_fill() -> None:
    assert poison_free_memory("cpu", 1024) is False
