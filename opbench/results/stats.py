"""Statistics of timing samples, computed when read, never stored in place of samples.

Pure Python so that compare, report and gate run anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1.0 - frac) + sorted_values[hi] * frac


def median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    total = 0.0
    log_half_n = n * math.log(0.5)
    for i in range(k + 1):
        total += math.exp(
            math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + log_half_n
        )
    return total


def median_confidence_interval(
    sorted_values: Sequence[float], level: float = 0.95
) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The interval [x_(j), x_(n-j+1)] covers the median with probability 1 - 2·P(X < j) for
    X ~ Binomial(n, 1/2); j is the largest index that keeps the coverage at least `level`.
    With fewer than 6 samples no such j exists at 95%, so the full range is returned.
    """
    n = len(sorted_values)
    if n == 0:
        raise ValueError("confidence interval of no values")
    alpha = 1.0 - level
    if n > 2000:
        # Normal approximation: exact sums get slow and agree to many digits by then.
        half = (
            0.5 * math.sqrt(n) * 1.959963984540054
            if level == 0.95
            else 0.5 * math.sqrt(n) * _z(level)
        )
        j = max(1, int(math.floor(n / 2 - half)))
    else:
        j = 0
        for candidate in range(1, n // 2 + 1):
            if 2 * _binomial_cdf(candidate - 1, n) <= alpha:
                j = candidate
            else:
                break
        if j == 0:
            return sorted_values[0], sorted_values[-1]
    return sorted_values[j - 1], sorted_values[n - j]


def _z(level: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + level / 2)


@dataclass(frozen=True)
class TimingStats:
    """Summary of one layer's samples (milliseconds), computed lazily.

    rounds: samples grouped by round; the gate works on round medians because most GPU
    noise lies between rounds (clocks, heat), not between calls within one.
    """

    rounds: tuple[tuple[float, ...], ...]

    @cached_property
    def samples(self) -> tuple[float, ...]:
        return tuple(sorted(t for r in self.rounds for t in r))

    @property
    def count(self) -> int:
        return len(self.samples)

    @cached_property
    def median(self) -> float:
        return quantile(self.samples, 0.5)

    @cached_property
    def mean(self) -> float:
        return sum(self.samples) / len(self.samples)

    @property
    def min(self) -> float:
        return self.samples[0]

    @property
    def max(self) -> float:
        return self.samples[-1]

    @cached_property
    def iqr(self) -> float:
        return quantile(self.samples, 0.75) - quantile(self.samples, 0.25)

    @cached_property
    def ci95(self) -> tuple[float, float]:
        return median_confidence_interval(self.samples, 0.95)

    @cached_property
    def round_medians(self) -> tuple[float, ...]:
        return tuple(median(r) for r in self.rounds if r)

    @cached_property
    def cv(self) -> float:
        """Coefficient of variation of the round medians (between-round noise)."""
        meds = self.round_medians
        if len(meds) < 2:
            return 0.0
        mu = sum(meds) / len(meds)
        var = sum((m - mu) ** 2 for m in meds) / (len(meds) - 1)
        return math.sqrt(var) / mu if mu > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """torch.utils.benchmark's warning rule: IQR above 10% of the median."""
        return self.median > 0 and self.iqr / self.median > 0.1
