"""Issue 51: an ambiguous cover moves a verdict only where the doubt could change it. A row
below target however its reference rows' time is shared out (all of it against the row's
fastest result alone) FAILs; a doubtful row never PASSes; a guessed link bounds nothing."""

from __future__ import annotations

from opbench.compare.compare import compare_run
from opbench.compare.model import Interval, Verdict
from opbench.compare.outcome import failing_rows
from opbench.compare.verdict import RowContext, backend_timing
from opbench.match.links import GUESS
from opbench.reference.model import ReferenceProfile
from opbench.results.model import RunResult
from tests.unit.compare.verdict_helpers import layer_result
from tests.unit.match.test_ort_fusions import WITHOUT_RELU, profile
from tests.unit.report.test_reports import result

HOLDS_MORE = "reference row 'conv' fused Conv+Relu and no relu layer follows conv"
SPAN = "reference row 'conv' fused Conv+Relu; layers bn lie between"


def timing(ms_per_result: tuple[float, ...], doubt: str, reference_ms: float = 1.0):
    results = [
        layer_result("m", f"l{i}", "conv2d", (1, 8), ms) for i, ms in enumerate(ms_per_result)
    ]
    context = RowContext(Interval(reference_ms, reference_ms, reference_ms), 1.5, doubt=doubt)
    return backend_timing("triton", [r.layer for r in results], results, context)


def test_a_row_below_target_however_shared_out_fails():
    t = timing((1 / 0.35,), HOLDS_MORE)  # 0.35x: the fused row's extra work only lowers it
    assert t.verdict == Verdict.FAIL
    assert "at best 0.35×" in t.reason and HOLDS_MORE in t.reason


def test_a_row_the_doubt_could_lift_stays_uncertain():
    # 1.0 / (0.5 + 0.3 + 0.3) = 0.91x on the span, but the row may cover a 0.3 ms layer alone
    t = timing((0.5, 0.3, 0.3), SPAN)
    assert t.verdict == Verdict.UNCERTAIN and t.reason == SPAN


def test_a_doubtful_row_above_target_is_never_pass():
    assert timing((0.1,), HOLDS_MORE).verdict == Verdict.UNCERTAIN


def test_a_guessed_link_bounds_nothing():
    t = timing((1 / 0.35,), f"{GUESS}: reference row 'conv' has no shape to confirm it")
    assert t.verdict == Verdict.UNCERTAIN


def test_slow_convs_against_fused_ort_rows_fail_at_the_default_target():
    """The issue's case: a suite without its ReLU layers against ORT's Conv+Relu rows, every
    layer far slower than ORT's row (about 0.35x and below): FAIL at 1.5x, in the gate's list."""
    names = [layer.name for layer in WITHOUT_RELU]
    ops = {"conv": "conv2d", "add": "add", "relu": "relu", "clip": "relu6", "pool": "avgpool2d",
           "flat": "flatten", "fc": "linear"}  # fmt: skip
    layers = tuple(
        result(name, 10.0, backend="torch", model="b", dtype="float32",
               op=next(op for prefix, op in ops.items() if name.startswith(prefix)))
        for name in names
    )  # fmt: skip
    run = RunResult(suite="b", started_at="t", device="cpu", layers=layers, complete=True)
    ref = ReferenceProfile(engine="onnxruntime", source="ort.json", format="onnxruntime",
                           layers=tuple(profile("extended")), device="cpu")  # fmt: skip
    comparison = compare_run(run, ref, backend="torch", allow_cpu_times=True)
    conv1 = next(r for r in comparison.rows if r.layers == ("conv1",))
    assert conv1.ambiguity and "work the run did not time" in conv1.ambiguity
    assert conv1.primary.verdict == Verdict.FAIL and conv1.primary.speedup.hi < 0.35
    assert conv1 in failing_rows(comparison)
