"""Statistics of timing samples (pure Python): median, IQR, order-statistic CI, cv; and the
derived figures a LayerResult reads from its samples."""

from __future__ import annotations

import math

import pytest

from opbench.results.model import Correctness, LayerResult, Status
from opbench.results.stats import TimingStats, median, median_confidence_interval, quantile


def test_stats_of_known_values() -> None:
    stats = TimingStats(((5.0, 1.0, 3.0), (2.0, 4.0)))
    assert stats.samples == (1.0, 2.0, 3.0, 4.0, 5.0)
    assert stats.count == 5
    assert stats.median == 3.0
    assert stats.mean == 3.0
    assert (stats.min, stats.max) == (1.0, 5.0)
    assert stats.iqr == pytest.approx(4.0 - 2.0)
    assert stats.round_medians == (3.0, 3.0)
    assert stats.cv == 0.0


def test_median_and_iqr_match_numpy() -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(7)
    values = rng.lognormal(0.0, 0.4, size=101).tolist()
    stats = TimingStats((tuple(values[:50]), tuple(values[50:])))
    assert stats.median == pytest.approx(float(np.median(values)))
    q75, q25 = np.percentile(values, [75, 25])
    assert stats.iqr == pytest.approx(float(q75 - q25))
    even = TimingStats((tuple(values[:10]),))
    assert even.median == pytest.approx(float(np.median(values[:10])))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_order_statistic_ci_is_the_full_range_below_6_samples(n: int) -> None:
    values = tuple(float(v) for v in range(10, 10 + n))
    stats = TimingStats((values,))
    assert stats.ci95 == (values[0], values[-1])


@pytest.mark.parametrize("n, j", [(9, 2), (10, 2), (20, 6), (100, 40)])
def test_order_statistic_ci_known_ranks(n: int, j: int) -> None:
    # The 95% distribution-free interval of the median is [x_(j), x_(n-j+1)] (1-based).
    values = tuple(float(v) for v in range(1, n + 1))
    assert TimingStats((values,)).ci95 == (float(j), float(n - j + 1))


def test_ci_contains_the_median_and_narrows_with_more_samples() -> None:
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(0)
    widths = []
    for n in (10, 100, 1000, 5000):
        values = tuple(rng.normal(1.0, 0.1, size=n).tolist())
        stats = TimingStats((values,))
        lo, hi = stats.ci95
        assert lo <= stats.median <= hi
        widths.append(hi - lo)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 5
    # Above 2000 samples the normal approximation is used; it stays ~ 2·1.96·σ·sqrt(π/2)/sqrt(n).
    expected = 2 * 1.96 * 0.1 * math.sqrt(math.pi / 2) / math.sqrt(5000)
    assert widths[-1] == pytest.approx(expected, rel=0.3)


def test_cv_of_round_medians() -> None:
    stats = TimingStats(((1.0, 1.0, 9.0), (2.0, 2.0, 0.0)))
    assert stats.round_medians == (1.0, 2.0)
    mean = 1.5
    sd = math.sqrt(((1 - mean) ** 2 + (2 - mean) ** 2) / 1)
    assert stats.cv == pytest.approx(sd / mean)
    assert TimingStats(((1.0, 2.0),)).cv == 0.0, "one round: no between-round spread"


def test_noisy_flag() -> None:
    assert not TimingStats(((1.0, 1.01, 1.02, 0.99),)).noisy
    assert TimingStats(((1.0, 2.0, 3.0, 4.0),)).noisy


def test_quantile_edges() -> None:
    assert quantile([4.0], 0.5) == 4.0
    assert quantile([1.0, 3.0], 0.5) == 2.0
    assert quantile([1.0, 2.0, 3.0], 0.0) == 1.0 and quantile([1.0, 2.0, 3.0], 1.0) == 3.0
    assert median([3.0, 1.0, 2.0]) == 2.0
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        median_confidence_interval([])


def test_stats_is_computed_from_samples_never_stored() -> None:
    stats = TimingStats(((3.0, 1.0), (2.0,)))
    assert stats.rounds == ((3.0, 1.0), (2.0,)), "the raw samples stay as given"
    assert stats.median == 2.0


def _result(**kw) -> LayerResult:
    base = dict(
        model="m",
        layer="l",
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(2, 4),
        output_shape=(2, 8),
    )
    return LayerResult(**{**base, **kw})


def test_layer_result_derived_figures() -> None:
    r = _result(
        samples_ms=((2.0, 2.0), (2.0,)),
        flops=4_000_000,
        bytes=2_000_000,
        correctness=Correctness(1e-3, 0.01, 0, 5e-3),
    )
    assert r.median_ms == 2.0
    assert r.tflops == pytest.approx(4e6 / 2e-3 / 1e12)
    assert r.gbps == pytest.approx(2e6 / 2e-3 / 1e9)
    assert r.correct and r.members == ("l",) and r.key == ("m", "l", "triton")
    fused = _result(covers=("conv", "bn", "relu"), layer="conv")
    assert fused.members == ("conv", "bn", "relu")


def test_layer_result_without_samples_has_no_stats() -> None:
    assert _result().stats is None and _result().median_ms is None and _result().tflops is None
    assert _result(samples_ms=((), ())).stats is None


@pytest.mark.parametrize(
    "correctness, status, correct",
    [
        (Correctness(1e-3, 0.1, 0, 5e-3), Status.OK, True),
        (Correctness(5e-3, 0.1, 0, 5e-3), Status.OK, True),
        (Correctness(6e-3, 0.1, 0, 5e-3), Status.OK, False),
        (Correctness(float("nan"), 0.1, 3, 5e-3), Status.OK, False),
        (Correctness(1e-3, 0.1, 1, 5e-3), Status.OK, False),
        (Correctness(1e-3, 0.1, 0, 5e-3), Status.ERROR, False),
        (None, Status.OK, False),
    ],
)
def test_correct_needs_ok_status_and_a_passed_check(correctness, status, correct) -> None:
    assert _result(correctness=correctness, status=status).correct is correct
