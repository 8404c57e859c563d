"""The gate's rules, one at a time, on hand-made runs whose round medians are known exactly."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from opbench.compare.baseline import baseline_from_run
from opbench.compare.gate import (
    GateOptions,
    Verdict,
    confirm,
    gate,
    inconclusive_keys,
    merge_rerun,
    parse_threshold,
)
from opbench.compare.gate_model import MIN_ROUNDS
from opbench.compare.gate_stats import benjamini_hochberg, classify, log_ratio_test, t_isf, t_sf
from opbench.errors import ExitCode, InputError
from opbench.results.fingerprint import NOT_RECORDED
from opbench.results.model import Correctness, LayerResult, RunResult, Status

ENV = {
    "gpu_name": "NVIDIA H200",
    "driver": "570.1",
    "torch": "2.11",
    "triton": "3.6",
    "kernel_version": "abc",
}
TIGHT = (1.0, 1.004, 0.996, 1.002, 0.998)  # CV 0.3%
NOISY = (1.0, 1.15, 0.87, 1.1, 0.9)  # CV 12%


def rounds_with_medians(medians, scale=1.0):
    """Three samples per round whose median is exactly the given value."""
    return tuple((m * scale * 0.99, m * scale, m * scale * 1.01) for m in medians)


def layer(name="fc", medians=TIGHT, scale=1.0, backend="triton", model="mlp", **kw) -> LayerResult:
    values = dict(
        model=model,
        layer=name,
        op="linear",
        backend=backend,
        status=Status.OK,
        dtype="float16",
        input_shape=(8, 64),
        output_shape=(8, 64),
        samples_ms=rounds_with_medians(medians, scale),
        correctness=Correctness(rel_l2=1e-4, max_abs=1e-3, nonfinite=0, tolerance=5e-3),
        timer="cuda-events",
    )
    values.update(kw)
    return LayerResult(**values)


def run(*layers: LayerResult, env=ENV, suite="s") -> RunResult:
    return RunResult(
        suite=suite, started_at="t0", device="cuda", env=dict(env), layers=layers, complete=True
    )


def judge(base_layers, cur_layers, options=None, base_env=ENV, cur_env=ENV):
    baseline = baseline_from_run(run(*base_layers, env=base_env))
    return gate(run(*cur_layers, env=cur_env), baseline, options or GateOptions())


def only(report):
    (verdict,) = report.verdicts
    return verdict


# -- threshold parsing ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [("5%", 0.05), ("0.05", 0.05), (" 12.5 % ", 0.125), ("1e-2", 0.01), (0.1, 0.1), ("100%", 1.0)],
)
def test_parse_threshold_accepts_percent_and_fraction(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "-5%", "0", "0%", "5%%", "nan", "5 percent", "inf"])
def test_parse_threshold_rejects_bad_text(text):
    with pytest.raises(InputError) as info:
        parse_threshold(text)
    assert info.value.exit_code == ExitCode.BAD_INPUT


# -- the verdict rule on intervals ------------------------------------------------------------


def test_classify_each_verdict_and_its_boundaries():
    thr = math.log1p(0.05)
    low = np.array([thr + 1e-9, -0.2, -0.01, -0.01, thr, -thr, -thr - 1e-9])
    high = np.array([0.3, -thr - 1e-9, 0.01, thr + 1e-9, 0.2, thr, 0.0])
    # regressed, improved, ok, inconclusive (upper over), inconclusive (low == thr), ok (edges), inconclusive
    assert classify(low, high, thr).tolist() == [1, -1, 0, 2, 2, 0, 2]


# -- Benjamini-Hochberg -----------------------------------------------------------------------


def test_benjamini_hochberg_step_up_and_adjusted_values():
    p = np.array([0.001, 0.02, 0.5, 0.04])
    significant, adjusted = benjamini_hochberg(p, q=0.05)
    # sorted 0.001, 0.02, 0.04, 0.5 against 0.0125, 0.025, 0.0375, 0.05: the largest k is 2
    assert significant.tolist() == [True, True, False, False]
    assert adjusted == pytest.approx([0.004, 0.04, 0.5, 0.05333333])


def test_benjamini_hochberg_step_up_rescues_a_p_value_above_its_own_line():
    p = np.array([0.01, 0.04, 0.03, 0.005])  # 0.03 > 2*0.05/4 but sorted 4th is 0.04 <= 0.05
    assert benjamini_hochberg(p, 0.05)[0].all()


def test_benjamini_hochberg_works_per_row_and_on_nothing():
    p = np.array([[0.001, 0.9], [0.2, 0.3]])
    assert benjamini_hochberg(p, 0.05)[0].tolist() == [[True, False], [False, False]]
    assert benjamini_hochberg(np.array([]), 0.05)[0].shape == (0,)


# -- Student's t ------------------------------------------------------------------------------


@pytest.mark.parametrize("df, t", [(1, 63.656741), (4, 4.604095), (8, 3.355387), (30, 2.749996)])
def test_t_quantiles_match_tables(df, t):
    assert float(t_isf(0.005, df)) == pytest.approx(t, rel=1e-6)
    assert float(t_sf(t, df)) == pytest.approx(0.005, rel=1e-5)


def test_t_sf_matches_mpmath():
    mpmath = pytest.importorskip("mpmath")
    for df in (1.0, 2.5, 7.3, 120.0):
        for t in (-3.0, -0.2, 0.0, 0.7, 2.0, 9.0):
            x = df / (df + t * t)
            tail = 0.5 * float(mpmath.betainc(df / 2, 0.5, 0, x, regularized=True))
            expected = tail if t > 0 else 1 - tail
            assert float(t_sf(t, df)) == pytest.approx(expected, rel=1e-10, abs=1e-14)


def test_welch_interval_on_known_data():
    base = np.log([1.0, 1.1, 0.9, 1.05, 0.95])
    cur = base + math.log(1.2)
    test = log_ratio_test([base], [cur], math.log(1.05), 0.99)
    assert math.exp(test.estimate[0]) == pytest.approx(1.2)
    se = math.sqrt(2 * base.var(ddof=1) / 5)
    assert test.df[0] == pytest.approx(8.0)  # equal variances and counts
    assert test.high[0] - test.estimate[0] == pytest.approx(3.355387 * se, rel=1e-6)


# -- verdicts on runs -------------------------------------------------------------------------


def test_clear_slowdown_is_regressed_significant_and_fails():
    report = judge([layer()], [layer(scale=1.3)])
    v = only(report)
    assert v.verdict is Verdict.REGRESSED and v.significant and v.fails
    assert v.ratio == pytest.approx(1.3, rel=1e-3) and v.ci_low > 1.05
    assert report.exit_code == ExitCode.FAILED_GATE == 1
    assert "regressed" in v.message and "x1.300" in v.message


def test_clear_speedup_is_improved_and_never_fails():
    report = judge([layer()], [layer(scale=0.7)])
    assert only(report).verdict is Verdict.IMPROVED and report.exit_code == 0


def test_same_speed_is_ok():
    report = judge([layer()], [layer(medians=TIGHT[::-1])])
    v = only(report)
    assert v.verdict is Verdict.OK and 1 / 1.05 <= v.ci_low <= v.ci_high <= 1.05
    assert report.exit_code == 0


def test_noise_wider_than_the_threshold_is_inconclusive_and_only_warns():
    report = judge([layer(medians=NOISY)], [layer(medians=NOISY, scale=1.08)])
    v = only(report)
    assert v.verdict is Verdict.INCONCLUSIVE and v.severity == "warning"
    assert report.exit_code == 0
    assert inconclusive_keys(report) == (("mlp", "fc", "triton"),)


def test_regressed_by_interval_but_not_significant_after_bh_does_not_fail():
    base = np.log(TIGHT)
    # find the shift whose one-sided p-value is 0.003: the interval excludes 1+T (p < 0.005)
    # but among 50 layers BH needs p <= 0.05/50 = 0.001
    lo, hi = 0.0, 0.2
    for _ in range(100):
        mid = (lo + hi) / 2
        p = log_ratio_test([base], [base + mid], math.log1p(0.05)).p_regressed[0]
        lo, hi = (mid, hi) if p > 0.003 else (lo, mid)
    shift = math.exp(hi)
    others = [layer(name=f"l{i}") for i in range(49)]
    report = judge([layer()] + others, [layer(scale=shift)] + others)
    v = report.verdicts[0]
    assert v.verdict is Verdict.REGRESSED and not v.significant and not v.fails
    assert v.severity == "warning" and "not significant" in v.message
    assert report.exit_code == 0
    alone = judge([layer()], [layer(scale=shift)])  # one test: BH threshold is q itself
    assert only(alone).fails


def test_identical_rounds_give_a_point_interval():
    same = (1.0,) * MIN_ROUNDS
    assert only(judge([layer(medians=same)], [layer(medians=same)])).verdict is Verdict.OK
    slower = only(judge([layer(medians=same)], [layer(medians=same, scale=1.1)]))
    assert slower.verdict is Verdict.REGRESSED and slower.p_value == 0.0 and slower.fails


# -- thresholds -------------------------------------------------------------------------------


def test_threshold_precedence_layer_then_option_then_default():
    base = [layer()]
    slower = layer(scale=1.08)
    assert only(judge(base, [slower])).verdict is Verdict.REGRESSED  # default 5%
    assert only(judge(base, [slower], GateOptions(threshold=0.10))).verdict is Verdict.OK
    assert only(judge(base, [replace(slower, regression_threshold=0.10)])).verdict is Verdict.OK
    own = replace(slower, regression_threshold=0.05)
    v = only(judge(base, [own], GateOptions(threshold=0.10)))
    assert v.verdict is Verdict.REGRESSED and v.threshold == pytest.approx(0.05)


def test_short_layer_threshold_is_at_least_three_cvs():
    medians = (1.0, 1.04, 0.96, 1.03, 0.97)  # CV of round medians ~3.4%
    cv = float(np.std(medians, ddof=1) / np.mean(medians))
    short = only(
        judge([layer(medians=medians, scale=0.01)], [layer(medians=medians, scale=0.0112)])
    )
    assert short.threshold == pytest.approx(3 * cv) and "short layer" in short.message
    assert short.verdict is not Verdict.REGRESSED
    long = only(judge([layer(medians=medians)], [layer(medians=medians, scale=1.12)]))
    assert long.threshold == pytest.approx(0.05)


# -- layers that cannot be compared -----------------------------------------------------------


def test_new_missing_crashed_and_unsupported_are_listed():
    bad = Correctness(rel_l2=0.5, max_abs=1.0, nonfinite=0, tolerance=5e-3)
    base = [layer("a"), layer("gone"), layer("b"), layer("c"), layer("d")]
    cur = [
        layer("a"),
        layer("b", status=Status.ERROR, samples_ms=(), correctness=None, message="CUDA OOM"),
        layer("c", correctness=bad),
        layer("d", status=Status.UNSUPPORTED, samples_ms=(), correctness=None, message="no int8"),
        layer("fresh"),
    ]
    report = judge(base, cur)
    verdicts = {v.layer: v for v in report.verdicts}
    assert {k: v.verdict for k, v in verdicts.items()} == {
        "a": Verdict.OK,
        "b": Verdict.CRASHED,
        "c": Verdict.CRASHED,
        "d": Verdict.UNSUPPORTED,
        "fresh": Verdict.NEW,
        "gone": Verdict.MISSING,
    }
    assert "CUDA OOM" in verdicts["b"].message and "rel_l2" in verdicts["c"].message
    assert verdicts["d"].severity == "warning"  # the baseline had a timing
    assert report.exit_code == ExitCode.LAYER_ERROR == 3


def test_a_crash_message_names_the_check_that_failed():
    # max_abs over its limit with rel_l2 well inside the tolerance: the message must say so.
    elementwise = Correctness(
        rel_l2=1e-4, max_abs=0.5, nonfinite=0, tolerance=5e-3, max_abs_limit=1e-2
    )
    second = Correctness(
        rel_l2=1e-4, max_abs=1e-3, nonfinite=0, tolerance=5e-3, failures=("second input: x",)
    )
    report = judge(
        [layer("a"), layer("b")],
        [layer("a", correctness=elementwise), layer("b", correctness=second)],
    )
    messages = {v.layer: v.message for v in report.verdicts}
    assert messages["a"] == "failed correctness: max_abs 5.0e-01 > 1.0e-02"
    assert messages["b"] == "failed correctness: second input: x"


def test_interpreted_timings_are_never_judged():
    v = only(judge([layer()], [layer(scale=2.0, interpreted=True)]))
    assert v.verdict is Verdict.INCONCLUSIVE and "interpreter" in v.message


def test_crash_outranks_incomparable_outranks_regression():
    crash = layer("b", status=Status.ERROR, samples_ms=(), correctness=None)
    other_gpu = dict(ENV, gpu_name="NVIDIA H100")
    assert judge([layer(), layer("b")], [layer(scale=2), crash]).exit_code == 3
    assert judge([layer(), layer("b")], [layer(scale=2), crash], cur_env=other_gpu).exit_code == 3
    assert judge([layer()], [layer(scale=2)], cur_env=other_gpu).exit_code == 4


def test_backend_filter():
    base = [layer(backend="torch"), layer(backend="triton")]
    report = judge(
        base,
        [layer(backend="torch", scale=2), layer(backend="triton")],
        GateOptions(backends=("triton",)),
    )
    assert [v.backend for v in report.verdicts] == ["triton"] and report.exit_code == 0


# -- environment ------------------------------------------------------------------------------


def test_env_change_is_incomparable_not_regressed():
    report = judge([layer()], [layer(scale=2.0)], cur_env=dict(ENV, driver="580.0"))
    assert report.incomparable and report.exit_code == ExitCode.BASELINE == 4
    assert [(d.key, d.baseline, d.current) for d in report.env_differences] == [
        ("driver", "570.1", "580.0")
    ]
    v = only(report)
    assert (
        v.verdict is Verdict.INCOMPARABLE
        and not v.fails
        and v.ratio == pytest.approx(2.0, rel=1e-3)
    )


def test_allow_env_change_judges_and_still_lists_differences():
    options = GateOptions(allow_env_change=True)
    report = judge([layer()], [layer(scale=2.0)], options, cur_env=dict(ENV, torch="2.12"))
    assert not report.incomparable and report.env_differences and report.exit_code == 1


def test_missing_env_keys():
    no_kernel = {k: v for k, v in ENV.items() if k != "kernel_version"}
    one_side = judge([layer()], [layer()], base_env=no_kernel)
    assert [(d.key, d.baseline) for d in one_side.env_differences] == [
        ("kernel_version", NOT_RECORDED)
    ]
    assert not judge([layer()], [layer()], base_env=no_kernel, cur_env=no_kernel).env_differences
    ignored = judge(
        [layer()], [layer()], GateOptions(ignore_env_keys=("kernel_version",)), base_env=no_kernel
    )
    assert not ignored.incomparable


@pytest.mark.parametrize(
    ("key", "base_value", "cur_value"),
    [
        ("opbench_vars", {"OPBENCH_CONV_PLAN": "a"}, {"OPBENCH_CONV_PLAN": "b"}),
        ("opbench_vars", {}, {"OPBENCH_LINEAR_FAST": "1"}),
        # docs/ci.md's demo: the slowed run needs --allow-env-change to be gated at all
        ("opbench_vars", {}, {"OPBENCH_TEST_SLOW_LAYERNORM": "1"}),
        ("plugins", [], [{"name": "opbench-extra", "version": "0.2"}]),
        (
            "plugins",
            [{"path": "p.py", "sha256": "aa"}],
            [{"path": "p.py", "sha256": "bb"}],
        ),
    ],
)
def test_opbench_vars_and_plugins_are_part_of_the_environment(key, base_value, cur_value):
    report = judge(
        [layer()],
        [layer()],
        base_env=dict(ENV, **{key: base_value}),
        cur_env=dict(ENV, **{key: cur_value}),
    )
    assert report.incomparable and report.exit_code == ExitCode.BASELINE
    assert [(d.key, d.baseline, d.current) for d in report.env_differences] == [
        (key, base_value, cur_value)
    ]
    allowed = judge(
        [layer()],
        [layer()],
        GateOptions(allow_env_change=True),
        base_env=dict(ENV, **{key: base_value}),
        cur_env=dict(ENV, **{key: cur_value}),
    )
    assert not allowed.incomparable and allowed.exit_code == ExitCode.OK


def test_no_vars_and_no_plugins_equal_not_recorded():
    # a baseline from before these keys were recorded stays comparable with a run setting none
    recorded = dict(ENV, opbench_vars={}, plugins=[])
    assert not judge([layer()], [layer()], cur_env=recorded).env_differences
    set_one = dict(ENV, opbench_vars={"OPBENCH_X": "1"})
    assert [d.key for d in judge([layer()], [layer()], cur_env=set_one).env_differences] == [
        "opbench_vars"
    ]


def test_a_baseline_of_another_suite_is_incomparable():
    baseline = baseline_from_run(run(layer(), suite="other"))
    report = gate(run(layer()), baseline)
    assert report.exit_code == 4 and report.env_differences[0].key == "suite"


# -- confirmation -----------------------------------------------------------------------------


def test_confirm_reruns_only_inconclusive_layers():
    base = [layer("steady"), layer("noisy", medians=NOISY)]
    first = gate(
        run(layer("steady"), layer("noisy", medians=NOISY, scale=1.3)),
        baseline_from_run(run(*base)),
    )
    assert inconclusive_keys(first) == (("mlp", "noisy", "triton"),)
    rerun = run(layer("noisy", medians=NOISY * 2, scale=1.02))
    merged = merge_rerun(run(layer("steady"), layer("noisy", medians=NOISY)), rerun)
    assert [r.layer for r in merged.layers] == ["steady", "noisy"]
    assert len(merged.layers[1].samples_ms) == 10
    second = confirm(
        run(layer("steady"), layer("noisy", medians=NOISY)), rerun, baseline_from_run(run(*base))
    )
    noisy = second.verdicts[1]
    assert noisy.confirmed and noisy.verdict is Verdict.INCONCLUSIVE
    assert "still inconclusive" in noisy.message and second.exit_code == 0
    assert inconclusive_keys(second) == ()


def test_gate_and_its_reports_import_neither_torch_nor_triton():
    import subprocess
    import sys

    code = (
        "import sys, opbench.compare.gate, opbench.compare.baseline, opbench.report.junit, "
        "opbench.report.bmf, opbench.report.github; "
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "[]"
