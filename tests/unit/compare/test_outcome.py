"""docs/compare.md's exit-code table, verdict by verdict: the target gate's code comes from
every verdict printed, a row's or a model's (compare/outcome.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from opbench.compare.compare import compare_run
from opbench.compare.model import Verdict
from opbench.compare.outcome import target_outcome
from opbench.errors import ExitCode
from opbench.reference.model import ReferenceProfile, ReferenceTiming
from opbench.results.model import Correctness, LayerResult, RunResult, crashed_results

GOOD = Correctness(rel_l2=1e-7, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
BAD = Correctness(rel_l2=0.5, max_abs=1.0, nonfinite=0, tolerance=1e-4)


def result(layer: str, ms: float, **kw) -> LayerResult:
    values = dict(
        model="m",
        layer=layer,
        op="linear",
        backend="triton",
        status="ok",
        dtype="float32",
        input_shape=(4, 8),
        output_shape=(4, 8),
        samples_ms=((ms,) * 20,) if ms else (),
        correctness=GOOD,
        device="cuda",
    )
    values.update(kw)
    return LayerResult(**values)


def outcome(*results: LayerResult, gate: bool = True, interpreted: bool = False):
    names = ("fc1", "fc2")
    spec = {"models": [{"name": "m", "layers": [{"name": n, "op": "linear"} for n in names]}]}
    results = tuple(replace(r, interpreted=interpreted) for r in results)
    run = RunResult("s", "t", "cuda", layers=results, suite_spec=spec, complete=True)
    rows = tuple(
        ReferenceTiming("x", "ref", i, name, median_ms=1.0) for i, name in enumerate(names)
    )
    comparison = compare_run(run, ReferenceProfile("x", "ref", "x", rows, 2.0))
    return comparison, target_outcome(comparison, crashed_results(run, "triton"), gate)


@pytest.mark.parametrize(
    ("results", "row_verdict", "code"),
    [
        ((result("fc1", 0.1), result("fc2", 0.1)), Verdict.PASS, ExitCode.OK),
        ((result("fc1", 0.1), result("fc2", 0.9)), Verdict.FAIL, ExitCode.FAILED_GATE),
        (
            (result("fc1", 0.1), result("fc2", 0.1, correctness=BAD)),
            Verdict.FAIL,
            ExitCode.LAYER_ERROR,
        ),
        (
            (result("fc1", 0.1), result("fc2", 0, status="error", message="boom")),
            Verdict.ERROR,
            ExitCode.LAYER_ERROR,
        ),
        ((result("fc1", 0.1), result("fc2", 0)), Verdict.ERROR, ExitCode.LAYER_ERROR),  # no samples
        (
            (result("fc1", 0.1), result("fc2", 0, status="unsupported")),
            Verdict.NOT_MEASURED,
            ExitCode.OK,
        ),
        ((result("fc1", 0.1),), Verdict.NOT_MEASURED, ExitCode.OK),  # fc2 not in this run
    ],
    ids=["pass", "fail", "incorrect", "crash", "no-samples", "unsupported", "not-run"],
)
def test_every_row_verdict_has_its_exit_code(results, row_verdict, code):
    comparison, found = outcome(*results)
    fc2 = next((row for row in comparison.rows if row.layers == ("fc2",)), None)
    assert fc2 is not None and fc2.primary.verdict == row_verdict
    assert found.code == code, found.lines
    if code != ExitCode.OK:
        assert found.lines and "fc2" in found.lines[0]


def test_uncertain_rows_come_from_a_straddling_interval():
    # 1.0 / 0.66 = 1.52x with samples that straddle the 1.5x target
    spread = tuple(0.66 * (1 + 0.05 * ((i % 5) - 2)) for i in range(20))
    comparison, found = outcome(result("fc1", 0.1), result("fc2", 0.66, samples_ms=(spread,)))
    fc2 = next(row for row in comparison.rows if row.layers == ("fc2",))
    assert fc2.primary.verdict == Verdict.UNCERTAIN and found.code == ExitCode.OK


def test_interpreted_times_never_fail_and_no_gate_never_hides_a_crash():
    _, slow = outcome(result("fc1", 5.0), result("fc2", 5.0), interpreted=True)
    assert slow.code == ExitCode.OK
    _, waived = outcome(result("fc1", 0.1), result("fc2", 0.9), gate=False)
    assert waived.code == ExitCode.OK and waived.lines[0].startswith("below target (not gated)")
    _, crash = outcome(result("fc1", 0.1), result("fc2", 0, status="error"), gate=False)
    assert crash.code == ExitCode.LAYER_ERROR


def test_a_model_verdict_of_fail_sets_exit_1_by_itself():
    comparison, _ = outcome(result("fc1", 0.1), result("fc2", 0.1))
    (model,) = comparison.models
    failing = replace(comparison, models=(replace(model, verdict=Verdict.FAIL),))
    assert {row.primary.verdict for row in failing.rows} == {Verdict.PASS}
    found = target_outcome(failing)
    assert found.code == ExitCode.FAILED_GATE and "1 model(s) FAIL (m)" in found.lines[0]
    errored = replace(comparison, models=(replace(model, verdict=Verdict.ERROR),))
    assert target_outcome(errored).code == ExitCode.LAYER_ERROR
