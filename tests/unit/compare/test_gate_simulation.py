"""The gate's statistics checked by simulation against a known truth.

Noise model: each sample is mu * exp(b_r + w_ri) with a between-round effect
b_r ~ N(0, cv^2) shared by the round and a within-round w_ri ~ N(0, (cv/2)^2) per sample,
so the CV of the round medians (what the gate and its CV floor see) is ~cv and the
between-round part dominates. Suites have 50 layers, 5 rounds of 20 samples a side unless
a test says otherwise, threshold 5%, level 99%, BH q = 0.05.

The vectorised path below calls the same functions `gate()` calls (log_ratio_test, classify,
benjamini_hochberg); `test_vectorised_path_matches_gate` pins that equivalence on RunResults.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from opbench.compare.baseline import baseline_from_run
from opbench.compare.gate import gate
from opbench.compare.gate_stats import benjamini_hochberg, classify, log_ratio_test
from opbench.results.model import Correctness, LayerResult, RunResult, Status

LAYERS = 50
ROUNDS = 5
PER_ROUND = 20
THRESHOLD = 0.05
LEVEL = 0.99
Q = 0.05
SLOWDOWN = 1.10


def simulate(rng, suites, cvs, rounds=ROUNDS, log_shift=0.0, mu_ms=1.0, chunk=100):
    """Round medians in ms, shape (suites, layers, rounds); cvs broadcasts over (suites, layers)."""
    cvs = np.broadcast_to(np.asarray(cvs, dtype=float), (suites, LAYERS))
    log_shift = np.broadcast_to(np.asarray(log_shift, dtype=float), (suites, LAYERS))
    out = np.empty((suites, LAYERS, rounds))
    for s in range(0, suites, chunk):
        cv = cvs[s : s + chunk, :, None, None]
        n = cv.shape[0]
        between = rng.standard_normal((n, LAYERS, rounds, 1)) * cv
        within = rng.standard_normal((n, LAYERS, rounds, PER_ROUND)) * (cv / 2)
        samples = mu_ms * np.exp(log_shift[s : s + chunk, :, None, None] + between + within)
        out[s : s + chunk] = np.median(samples, axis=-1)
    return out


def gate_suites(base_ms, cur_ms, threshold=THRESHOLD):
    """(fails, codes, p) per suite and layer: REGRESSED by the interval and significant after BH."""
    suites, layers = base_ms.shape[:2]
    thr = math.log1p(threshold)
    test = log_ratio_test(
        np.log(base_ms).reshape(suites * layers, -1),
        np.log(cur_ms).reshape(suites * layers, -1),
        thr,
        LEVEL,
    )
    codes = classify(test.low, test.high, thr).reshape(suites, layers)
    p = test.p_regressed.reshape(suites, layers)
    significant, _ = benjamini_hochberg(p, Q)
    return (codes == 1) & significant, codes, p


def regressed_layers(suites, count=5):
    """Log shift: the first `count` layers of every suite are SLOWDOWN slower."""
    shift = np.zeros((suites, LAYERS))
    shift[:, :count] = math.log(SLOWDOWN)
    return shift


def oracle_power(cv, rounds):
    """Power of the best possible 99% interval: a z interval with the true sigma known."""
    se = cv * math.sqrt(2 / rounds)
    z = NormalDist().inv_cdf(0.5 + LEVEL / 2)
    return 1 - NormalDist().cdf((math.log1p(THRESHOLD) + z * se - math.log(SLOWDOWN)) / se)


def _layer(i, round_medians):
    return LayerResult(
        model="m",
        layer=f"l{i}",
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(1,),
        output_shape=(1,),
        samples_ms=tuple((float(m),) for m in round_medians),
        correctness=Correctness(rel_l2=0.0, max_abs=0.0, nonfinite=0, tolerance=1e-3),
    )


def _run(rounds_ms):
    layers = tuple(_layer(i, r) for i, r in enumerate(rounds_ms))
    return RunResult(
        suite="sim", started_at="t", device="cuda", env={}, layers=layers, complete=True
    )


def test_vectorised_path_matches_gate():
    rng = np.random.default_rng(7)
    shift = regressed_layers(4, count=10)
    base, cur = simulate(rng, 4, 0.02), simulate(rng, 4, 0.02, log_shift=shift)
    fails, codes, p = gate_suites(base, cur)
    assert fails.any()  # the comparison is not vacuous
    for s in range(4):
        report = gate(_run(cur[s]), baseline_from_run(_run(base[s])))
        assert [v.fails for v in report.verdicts] == fails[s].tolist()
        assert [v.p_value for v in report.verdicts] == pytest.approx(
            p[s].tolist(), rel=1e-9, abs=1e-15
        )
        codes_from_gate = [
            {"OK": 0, "REGRESSED": 1, "IMPROVED": -1, "INCONCLUSIVE": 2}[v.verdict.value]
            for v in report.verdicts
        ]
        assert codes_from_gate == codes[s].tolist()


@pytest.mark.parametrize("cv", [0.01, 0.03, 0.10])
def test_false_alarm_rate_with_no_true_change(cv):
    """(a) <= 1% of 1000 suites of 50 unchanged layers have any failing layer."""
    rng = np.random.default_rng(int(cv * 1000))
    suites = 1000
    fails, _, _ = gate_suites(simulate(rng, suites, cv), simulate(rng, suites, cv))
    assert fails.any(axis=1).mean() <= 0.01


@pytest.mark.parametrize("cv", [0.01, 0.03, 0.10])
def test_interval_coverage(cv):
    """The 99% interval holds the true ratio (here 1.10) in about 99% of layers."""
    rng = np.random.default_rng(11 + int(cv * 1000))
    base = simulate(rng, 200, cv)
    cur = simulate(rng, 200, cv, log_shift=math.log(SLOWDOWN))
    shape = (200 * LAYERS, ROUNDS)
    test = log_ratio_test(
        np.log(base).reshape(shape), np.log(cur).reshape(shape), math.log1p(THRESHOLD), LEVEL
    )
    covered = (test.low <= math.log(SLOWDOWN)) & (math.log(SLOWDOWN) <= test.high)
    assert 0.985 <= covered.mean() <= 0.996


@pytest.mark.parametrize("cv, suites, limit", [(0.03, 1000, 0.01), (0.10, 2000, 0.0125)])
def test_false_alarm_rate_with_confirmation_runs(cv, suites, limit):
    """(a) again, counting the second look: inconclusive layers (and regressions not
    significant) are re-run with 10 rounds against the same baseline and BH runs again.
    The second look shares the baseline's error, so at CV 10% the long-run rate rises from
    0.40% to 0.73% (measured over 20000 suites); 2000 suites cannot resolve 0.73% from 1%
    (standard error ~0.2%), hence the 1.25% bound here."""
    rng = np.random.default_rng(3)
    base = simulate(rng, suites, cv)
    fails, codes, p = gate_suites(base, simulate(rng, suites, cv))
    again = (codes == 2) | ((codes == 1) & ~fails)
    rerun = simulate(rng, suites, cv, rounds=2 * ROUNDS)
    thr = math.log1p(THRESHOLD)
    second = log_ratio_test(np.log(base[again]), np.log(rerun[again]), thr, LEVEL)
    codes2, p2 = codes.copy(), p.copy()
    codes2[again] = classify(second.low, second.high, thr)
    p2[again] = second.p_regressed
    significant, _ = benjamini_hochberg(p2, Q)
    assert ((codes2 == 1) & significant).any(axis=1).mean() <= limit


@pytest.mark.parametrize("cv, rounds", [(0.01, 5), (0.02, 10), (0.03, 20)])
def test_power_to_detect_a_ten_percent_slowdown(cv, rounds):
    """(b) A true 10% slowdown in 5 of 50 layers is REGRESSED and significant >= 95% of the
    time, given enough rounds for the noise: 5 at CV 1%, 10 at CV 2%, 20 at CV 3%."""
    rng = np.random.default_rng(100 + rounds)
    suites = 400
    base = simulate(rng, suites, cv, rounds=rounds)
    cur = simulate(rng, suites, cv, rounds=rounds, log_shift=regressed_layers(suites))
    fails, _, _ = gate_suites(base, cur)
    assert fails[:, :5].mean() >= 0.95
    assert not fails[:, 5:].any()  # the unchanged layers of the same suites stay quiet


def test_cv3_with_five_rounds_cannot_reach_95_percent_power():
    """The issue's target (b) at CV 3% with 5 rounds is out of reach for ANY valid 99%
    interval: even knowing the true sigma, the lower bound clears 1.05 less than half the
    time. The gate may not beat that bound (it would be anti-conservative if it did)."""
    bound = oracle_power(0.03, ROUNDS)
    assert bound < 0.5
    rng = np.random.default_rng(5)
    suites = 400
    base = simulate(rng, suites, 0.03)
    fails, _, _ = gate_suites(base, simulate(rng, suites, 0.03, log_shift=regressed_layers(suites)))
    power = fails[:, :5].mean()
    assert 0.02 <= power <= bound
    assert oracle_power(0.03, 20) >= 0.95 and oracle_power(0.01, 5) >= 0.95


def test_short_layers_keep_false_alarms_low():
    """Very short layers (CV floor on) at CV 10%: still no false alarms."""
    from opbench.compare.gate import CV_FLOOR_FACTOR

    rng = np.random.default_rng(9)
    base, cur = simulate(rng, 200, 0.10, mu_ms=0.01), simulate(rng, 200, 0.10, mu_ms=0.01)

    def cv(x):
        return x.std(axis=-1, ddof=1) / x.mean(axis=-1)

    threshold = np.maximum(THRESHOLD, CV_FLOOR_FACTOR * np.maximum(cv(base), cv(cur)))
    thr = np.log1p(threshold).reshape(-1)
    shape = (200 * LAYERS, ROUNDS)
    test = log_ratio_test(np.log(base).reshape(shape), np.log(cur).reshape(shape), thr, LEVEL)
    significant, _ = benjamini_hochberg(test.p_regressed.reshape(200, LAYERS), Q)
    codes = classify(test.low, test.high, thr).reshape(200, LAYERS)
    assert not ((codes == 1) & significant).any()
