"""Correctness.reasons: the real reason a check failed, which the compare verdict and the gate
both print (not always "rel_l2 > tolerance")."""

from __future__ import annotations

import pytest

from opbench.compare.verdict import incorrect_reason
from opbench.results.model import Correctness, LayerResult, Status

GOOD = dict(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"max_abs": 0.5, "max_abs_limit": 1e-2}, "max_abs 5.0e-01 > 1.0e-02"),
        ({"unwritten": 7}, "7 elements never written"),
        ({"nonfinite": 2}, "2 NaN/Inf"),
        ({"rel_l2": 3e-2}, "rel_l2 3.0e-02 > 1.0e-04"),
        ({"rel_l2": float("nan")}, "rel_l2 nan > 1.0e-04"),
    ],
)
def test_each_failed_check_is_named(changes, reason) -> None:
    corr = Correctness(**{**GOOD, **changes})
    assert corr.reasons == (reason,) and not corr.passed


def test_the_checkers_own_failures_come_first_and_alone() -> None:
    failures = ("second input: rel_l2 2.0e-02 > 1.0e-04", "last timed call differs from the first")
    corr = Correctness(**GOOD, failures=failures)
    assert corr.reasons == failures and not corr.passed
    result = LayerResult(
        model="m", layer="fc", op="linear", backend="triton", status=Status.OK,
        dtype="float32", input_shape=(2, 3), output_shape=(2, 3), correctness=corr,
    )  # fmt: skip
    reason = incorrect_reason(result)
    assert reason == f"incorrect: fc: {failures[0]}; {failures[1]}"
    assert "tolerance" not in reason.split("; ")[1]


def test_a_good_result_has_no_reason() -> None:
    assert Correctness(**GOOD).reasons == () and Correctness(**GOOD).passed
