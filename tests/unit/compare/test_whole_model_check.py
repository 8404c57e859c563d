"""The whole model's output check (run.json's end_to_end `correctness`) reaches the comparison
and every report: a forward whose outputs are wrong never counts as a speed-up."""

from __future__ import annotations

from pathlib import Path

from opbench.compare.compare import compare_run
from opbench.compare.model import Verdict
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.report.csvjson import comparison_json, read_comparison
from opbench.report.html import render_html
from opbench.report.markdown import render_markdown
from opbench.results.model import Correctness, EndToEnd, LayerResult, RunResult

GOOD = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
WRONG = Correctness(
    rel_l2=0.3,
    max_abs=2.0,
    nonfinite=0,
    tolerance=1e-4,
    max_abs_limit=1e-3,
    failures=("output 'out': rel_l2 3.0e-01 > 1.0e-04",),
)


def layer(name: str, ms: float) -> LayerResult:
    return LayerResult(
        model="m", layer=name, op="relu", backend="triton", status="ok", dtype="float32",
        input_shape=(2, 8), output_shape=(2, 8), correctness=GOOD,
        samples_ms=(tuple(ms * (1 + 0.01 * (i % 3)) for i in range(12)),), device="cuda",
    )  # fmt: skip


def run_with(correctness: Correctness | None) -> RunResult:
    e2e = EndToEnd(
        "m", "triton", "ok", (tuple(0.1 for _ in range(12)),), "cuda-events",
        correctness=correctness, outputs=("out",),
    )  # fmt: skip
    return RunResult(
        suite="s", started_at="2026-11-25T00:00:00Z", device="cuda", complete=True,
        layers=(layer("a", 0.05), layer("out", 0.05)), end_to_end=(e2e,),
    )  # fmt: skip


PROFILE = ReferenceProfile(
    engine="onnxruntime",
    source="ref.json",
    format="onnxruntime",
    total_ms=1.0,
    layers=tuple(
        ReferenceTiming(
            engine="onnxruntime",
            source="ref.json",
            index=i,
            name=name,
            median_ms=0.5,
            min_ms=0.45,
            max_ms=0.55,
            status=RefStatus.TIMED,
            raw_type="Relu",
        )  # fmt: skip
        for i, name in enumerate(("a", "out"))
    ),
)


def test_a_wrong_whole_model_fails_the_model_and_shows_in_every_report(tmp_path: Path) -> None:
    comparison = compare_run(run_with(WRONG), PROFILE)
    (model,) = comparison.models
    assert model.verdict == Verdict.FAIL
    assert (
        model.reason == "the whole model's output is wrong: output 'out': rel_l2 3.0e-01 > 1.0e-04"
    )
    (timing,) = model.end_to_end
    assert timing.failures == WRONG.failures and timing.check.startswith("FAIL: output 'out'")
    assert "FAIL: output &#x27;out&#x27;: rel_l2 3.0e-01" in render_html(comparison, [])
    assert "❌ FAIL: output 'out'" in render_markdown(comparison)
    (tmp_path / "comparison.json").write_text(comparison_json(comparison))
    assert read_comparison(tmp_path) == comparison


def test_a_right_whole_model_is_judged_on_its_time() -> None:
    comparison = compare_run(run_with(GOOD), PROFILE)
    (model,) = comparison.models
    assert model.verdict == Verdict.PASS, model.reason
    assert model.end_to_end[0].check == "ok (rel_l2 1.0e-06)"


def test_an_older_run_without_the_check_says_so() -> None:
    comparison = compare_run(run_with(None), PROFILE)
    (model,) = comparison.models
    assert model.end_to_end[0].failures is None
    assert model.end_to_end[0].check == "not checked"
    assert "not checked" in render_markdown(comparison)
