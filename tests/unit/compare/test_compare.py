"""Verdicts, intervals, grouping and totals of `compare_run`."""

from __future__ import annotations

import math

import pytest

from opbench.compare.compare import compare_run
from opbench.compare.model import Interval, Verdict
from opbench.compare.peaks import peaks_from_env
from opbench.compare.verdict import reference_interval, speedup_interval, verdict_of
from opbench.errors import InputError
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus
from opbench.results.model import Correctness, LayerResult, RunResult

GOOD = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)
BAD = Correctness(rel_l2=3e-2, max_abs=1.0, nonfinite=0, tolerance=1e-4)


def result(
    layer: str,
    ms: float,
    *,
    backend: str = "triton",
    model: str = "mlp",
    op: str = "linear",
    covers: tuple[str, ...] = (),
    status: str = "ok",
    correctness: Correctness | None = GOOD,
    spread: float = 0.0,
    target: float = 1.5,
    message: str | None = None,
) -> LayerResult:
    """30 samples around `ms`: all equal when spread is 0, so the median's interval is [ms, ms]."""
    samples = tuple(ms * (1 + spread * ((i % 7) - 3) / 3) for i in range(30)) if ms else ()
    return LayerResult(
        model=model,
        layer=layer,
        op=op,
        backend=backend,
        status=status,
        dtype="float16",
        input_shape=(4, 8),
        output_shape=(4, 8),
        covers=covers,
        samples_ms=(samples,) if samples else (),
        correctness=correctness if status == "ok" else None,
        target_speedup=target,
        message=message,
        flops=2_000_000,
        bytes=64_000,
    )


def ref(
    name: str,
    ms: float | None,
    index: int = 0,
    *,
    status: str = RefStatus.TIMED,
    lo: float | None = None,
    hi: float | None = None,
    noise: float | None = None,
) -> ReferenceTiming:
    return ReferenceTiming(
        engine="onnxruntime",
        source="ref.json",
        index=index,
        name=name,
        status=status,
        median_ms=ms,
        min_ms=lo,
        max_ms=hi,
        noise_ms=noise,
    )


def run_of(*results: LayerResult, env: dict | None = None) -> RunResult:
    return RunResult(
        suite="s",
        started_at="2026-11-22T00:00:00Z",
        device="cuda",
        layers=results,
        complete=True,
        env=env or {},
    )


def profile(*rows: ReferenceTiming, total: float | None = None) -> ReferenceProfile:
    return ReferenceProfile(
        engine="onnxruntime", source="ref.json", format="onnxruntime", layers=rows, total_ms=total
    )


def only_row(comparison):
    assert len(comparison.rows) == 1
    return comparison.rows[0]


# ---- verdict rules ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("speedup", "verdict"),
    [
        (Interval(2.0, 1.5, 2.5), Verdict.PASS),  # lower bound exactly at the target passes
        (Interval(2.0, 1.4999, 2.5), Verdict.UNCERTAIN),
        (Interval(1.4, 1.2, 1.5), Verdict.UNCERTAIN),  # upper bound at the target is not a fail
        (Interval(1.4, 1.2, 1.4999), Verdict.FAIL),
    ],
)
def test_verdict_boundaries(speedup: Interval, verdict: str):
    assert verdict_of(speedup, 1.5) == verdict


def test_speedup_interval_is_conservative():
    s = speedup_interval(Interval(3.0, 2.0, 4.0), Interval(1.0, 0.5, 2.0))
    assert (s.value, s.lo, s.hi) == (3.0, 1.0, 8.0)


def test_reference_interval_from_min_max_and_noise():
    assert reference_interval(ref("a", 2.0, lo=1.5, hi=3.0)) == Interval(2.0, 1.5, 3.0)
    # noise is a standard deviation: the 95% interval is time +- 1.96 noise, and a measured
    # time is never below zero
    assert reference_interval(ref("a", 2.0, noise=0.5)) == Interval(2.0, 2.0 - 0.98, 2.0 + 0.98)
    assert reference_interval(ref("a", 0.2, noise=0.5)) == Interval(0.2, 0.0, 0.2 + 0.98)
    assert reference_interval(ref("a", 2.0)) == Interval(2.0, 2.0, 2.0)
    assert reference_interval(ref("a", None)) is None


@pytest.mark.parametrize(
    ("ref_ms", "lo", "hi", "verdict"),
    [
        (3.0, 2.0, 4.0, Verdict.PASS),  # 2.0 / 1.0 = 2.0 >= 1.5 at the lower bound
        (3.0, 1.2, 4.0, Verdict.UNCERTAIN),  # lower bound 1.2 < 1.5 <= upper 4.0
        (1.2, 1.0, 1.4, Verdict.FAIL),  # upper bound 1.4 < 1.5
    ],
)
def test_layer_verdict_uses_reference_spread(ref_ms, lo, hi, verdict):
    c = compare_run(run_of(result("fc1", 1.0)), profile(ref("fc1", ref_ms, lo=lo, hi=hi)))
    row = only_row(c)
    assert row.primary.verdict == verdict
    assert row.primary.speedup.value == pytest.approx(ref_ms)


def test_opbench_interval_comes_from_the_median_ci():
    # noisy samples widen opbench's interval: a 1.55x median speedup is no longer a sure pass
    c = compare_run(run_of(result("fc1", 1.0, spread=0.2)), profile(ref("fc1", 1.55)))
    row = only_row(c)
    assert row.primary.time.lo < 1.0 < row.primary.time.hi
    assert row.primary.speedup.lo < 1.5 < row.primary.speedup.hi
    assert row.primary.verdict == Verdict.UNCERTAIN


def test_incorrect_layer_never_passes():
    c = compare_run(run_of(result("fc1", 1.0, correctness=BAD)), profile(ref("fc1", 100.0)))
    row = only_row(c)
    assert row.primary.verdict == Verdict.FAIL
    assert row.primary.reason.startswith("incorrect")
    assert row.primary.speedup.value == pytest.approx(100.0)
    assert c.failed


def test_unchecked_layer_never_passes():
    c = compare_run(run_of(result("fc1", 1.0, correctness=None)), profile(ref("fc1", 100.0)))
    assert only_row(c).primary.verdict == Verdict.FAIL


@pytest.mark.parametrize(
    ("status", "verdict"),
    [("unsupported", Verdict.NOT_MEASURED), ("error", Verdict.ERROR)],
)
def test_layers_that_did_not_run_say_why_with_their_message(status, verdict):
    # a crash is ERROR (exit 3); a layer the backend does not support was never timed:
    # NOT-MEASURED (exit 0), and the model is not judged whole without it
    c = compare_run(
        run_of(result("fc1", 0, status=status, message="int8 needs sm80")), profile(ref("fc1", 1.0))
    )
    row = only_row(c)
    assert row.primary.verdict == verdict
    assert "int8 needs sm80" in row.primary.reason and status in row.primary.reason
    assert not c.failed
    assert c.models[0].verdict in (Verdict.ERROR, Verdict.UNCERTAIN)
    assert c.models[0].verdict != Verdict.PASS


def test_target_option_overrides_suite_target():
    r = run_of(result("fc1", 1.0, target=3.0))
    assert only_row(compare_run(r, profile(ref("fc1", 2.0)))).primary.verdict == Verdict.FAIL
    c = compare_run(r, profile(ref("fc1", 2.0)), target=1.5)
    assert only_row(c).target == 1.5
    assert only_row(c).primary.verdict == Verdict.PASS


# ---- grouping ------------------------------------------------------------------------------------


def test_one_reference_row_covering_several_layers_sums_them():
    r = run_of(result("conv", 1.0, spread=0.1), result("relu", 0.5, spread=0.1))
    c = compare_run(r, profile(ref("conv + relu", 3.0)))
    row = only_row(c)
    assert row.layers == ("conv", "relu")
    conv, relu = r.layers[0].stats, r.layers[1].stats
    assert row.primary.time.value == pytest.approx(conv.median + relu.median)
    assert row.primary.time.lo == pytest.approx(conv.ci95[0] + relu.ci95[0])
    assert row.primary.time.hi == pytest.approx(conv.ci95[1] + relu.ci95[1])
    assert row.primary.results == 2


def test_fused_result_counts_once():
    fused = result("conv", 1.0, op="conv2d", covers=("conv", "bn", "relu"))
    ops = {"conv": "conv2d", "bn": "batchnorm2d", "relu": "relu"}
    per_layer = [result(n, 0.6, backend="torch", op=op) for n, op in ops.items()]
    c = compare_run(
        run_of(fused, *per_layer),
        profile(
            ref("/conv/Conv", 2.0, 0),
            ref("/bn/BatchNormalization", 1.0, 1),
            ref("/relu/Relu", 1.0, 2),
        ),
    )
    row = only_row(c)  # the triton fusion joins the three reference rows into one row
    assert row.layers == ("conv", "bn", "relu")
    assert row.reference.value == pytest.approx(4.0)
    assert row.primary.results == 1
    assert row.primary.time.value == pytest.approx(1.0)
    torch_timing = row.timing("torch")
    assert torch_timing.time.value == pytest.approx(1.8)
    assert c.models[0].opbench_total_ms == pytest.approx(1.0)


def test_several_reference_rows_for_one_layer_sum():
    c = compare_run(
        run_of(result("fc1", 1.0)), profile(ref("/fc1/MatMul", 2.0, 0), ref("/fc1/Add", 1.0, 1))
    )
    row = only_row(c)
    assert row.reference.value == pytest.approx(3.0)
    assert row.reference_names == ("/fc1/MatMul", "/fc1/Add")


def test_unmatched_on_both_sides_and_overhead_are_listed():
    r = run_of(result("fc1", 1.0), result("fc2", 1.0))
    p = profile(
        ref("fc1", 2.0, 0),
        ref("mystery", 0.3, 1),
        ref("reformat", 0.1, 2, status=RefStatus.OVERHEAD),
        ref("folded", None, 3, status=RefStatus.NOT_RUN),
        ref("input", None, 4, status=RefStatus.INPUT),
    )
    c = compare_run(r, p)
    assert [(row.layers, row.primary.verdict) for row in c.rows] == [
        (("fc1",), Verdict.PASS),
        (("fc2",), Verdict.MISSING),
    ]
    assert [(u.side, u.name) for u in c.unmatched] == [("reference", "mystery")]
    assert [(o.name, o.status) for o in c.overhead] == [
        ("reformat", RefStatus.OVERHEAD),
        ("folded", RefStatus.NOT_RUN),
        ("input", RefStatus.INPUT),
    ]
    summary = c.models[0]
    assert summary.overhead_ms == pytest.approx(0.1)
    assert summary.reference_total_ms == pytest.approx(2.4)  # every row with a time
    assert summary.opbench_total_ms == pytest.approx(2.0)  # every layer, matched or not


def test_model_summary():
    r = run_of(result("a", 1.0), result("b", 1.0), result("c", 2.0))
    c = compare_run(r, profile(ref("a", 4.0, 0), ref("b", 1.0, 1), ref("c", 4.0, 2), total=10.0))
    m = c.models[0]
    assert (m.rows, m.at_target, m.compared) == (3, 2, 3)
    assert m.counts[Verdict.FAIL] == 1
    assert m.matched_reference_ms == pytest.approx(9.0)
    assert m.matched_opbench_ms == pytest.approx(4.0)
    assert m.total_speedup == pytest.approx(9.0 / 4.0)
    assert m.geomean_speedup == pytest.approx((4.0 * 1.0 * 2.0) ** (1 / 3))
    assert m.reference_total_ms == 10.0
    assert m.whole_speedup == pytest.approx(10.0 / 4.0)


def test_a_layer_the_backend_did_not_time_is_not_measured_and_the_model_not_judged():
    r = run_of(result("a", 1.0), result("b", 1.0, backend="torch"))
    c = compare_run(r, profile(ref("a", 2.0, 0), ref("b", 2.0, 1)))
    by_layer = {row.layers: row for row in c.rows}
    assert by_layer[("b",)].primary.verdict == Verdict.NOT_MEASURED
    assert "not in this run: no triton result for b" in by_layer[("b",)].primary.reason
    assert by_layer[("b",)].timing("torch").verdict == Verdict.PASS
    model = c.models[0]
    assert model.verdict == Verdict.UNCERTAIN and not model.complete
    assert "1 of 2 layers have no triton time in this run (b" in model.reason
    assert model.whole_speedup is None and c.whole_speedup is None


def test_several_models_with_qualified_reference_names():
    r = run_of(result("fc1", 1.0, model="mlp"), result("conv", 1.0, model="cnn"))
    p = profile(ref("/mlp/fc1/Gemm", 2.0, 0), ref("/cnn/conv/Conv", 3.0, 1))
    c = compare_run(r, p)
    assert c.how_matched == "qualified names"
    assert [(row.model, row.layers) for row in c.rows] == [("mlp", ("fc1",)), ("cnn", ("conv",))]
    assert [m.reference_total_ms for m in c.models] == [2.0, 3.0]


def test_model_option_leaves_other_models_rows_out_quietly():
    r = run_of(result("fc1", 1.0, model="mlp"), result("conv", 1.0, model="cnn"))
    p = profile(ref("/mlp/fc1/Gemm", 2.0, 0), ref("/cnn/conv/Conv", 3.0, 1))
    c = compare_run(r, p, model="cnn")
    assert [row.model for row in c.rows] == ["cnn"]
    assert not c.unmatched
    assert any("other models" in note for note in c.notes)


# ---- bad input -----------------------------------------------------------------------------------


def test_unknown_backend_is_bad_input():
    with pytest.raises(InputError, match="no results for backend 'tensorrt'"):
        compare_run(run_of(result("fc1", 1.0)), profile(ref("fc1", 1.0)), backend="tensorrt")


@pytest.mark.parametrize("target", [0.0, -1.0, math.inf, math.nan])
def test_bad_target(target):
    with pytest.raises(InputError, match="--target"):
        compare_run(run_of(result("fc1", 1.0)), profile(ref("fc1", 1.0)), target=target)


def test_empty_inputs_are_bad_input():
    with pytest.raises(InputError, match="no layer results"):
        compare_run(run_of(), profile(ref("fc1", 1.0)))
    with pytest.raises(InputError, match="no layers"):
        compare_run(run_of(result("fc1", 1.0)), profile())


def test_peaks_from_env_or_nominal():
    nominal = peaks_from_env({"gpu_name": "NVIDIA H200"})
    assert (nominal.tflops, nominal.gbps, nominal.measured) == (790.0, 4270.0, False)
    assert nominal.label.startswith("nominal H200, not measured")
    a100 = peaks_from_env({"gpu_name": "NVIDIA A100-SXM4-80GB"})
    assert (a100.tflops, a100.measured) == (312.0, False)
    measured = peaks_from_env({"peaks": {"tflops": 700, "gbps": 4000}, "gpu_name": "H200"})
    assert (measured.tflops, measured.gbps, measured.measured) == (700.0, 4000.0, True)
    assert peaks_from_env({"peaks": {"tflops": "x"}, "gpu_name": "NVIDIA H200"}) == nominal
    # no GPU roofs on a CPU run, nor for a GPU whose figures are unknown
    assert peaks_from_env({}, "cpu") is None
    assert peaks_from_env({"gpu_name": "Some Future GPU"}) is None
    cpu_measured = peaks_from_env({"peaks": {"tflops": 2, "gbps": 90, "label": "cpu"}}, "cpu")
    assert cpu_measured is not None and cpu_measured.label == "cpu"
