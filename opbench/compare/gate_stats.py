"""Statistics for the regression gate: Student's t, Welch's interval on log round medians,
Benjamini-Hochberg. Vectorised with numpy so that the simulation tests run exactly this code
over thousands of suites; numpy has no special functions and scipy is not a dependency, so
the t distribution is computed here (incomplete beta by continued fraction).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

MAX_DF = 1e4  # beyond this Student's t is the normal distribution to 1e-4


# ----------------------------------------------------------------------------------------------
# Student's t
# ----------------------------------------------------------------------------------------------


def _log_gamma(x: np.ndarray) -> np.ndarray:
    """log Gamma(x) for x > 0: shift below 10 up by recurrence, then Stirling's series."""
    x = np.asarray(x, dtype=float)
    shift = x < 10.0
    y = np.where(shift, x + 10.0, x)
    correction = np.zeros_like(x)
    if shift.any():
        xs = x[shift]
        correction[shift] = np.log(np.prod(xs[:, None] + np.arange(10.0), axis=1))
    inv = 1.0 / y
    inv2 = inv * inv
    series = inv * (1 / 12 - inv2 * (1 / 360 - inv2 * (1 / 1260 - inv2 / 1680)))
    return (y - 0.5) * np.log(y) - y + 0.5 * math.log(2 * math.pi) + series - correction


def _betainc(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Regularised incomplete beta I_x(a, b), by its continued fraction (modified Lentz)."""
    a, b, x = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (a, b, x)))
    flip = x > (a + 1.0) / (a + b + 2.0)  # the fraction converges fast only below this point
    a, b, x = np.where(flip, b, a), np.where(flip, a, b), np.where(flip, 1.0 - x, x)
    tiny = 1e-300
    c = np.ones_like(x)
    d = 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
    h = d.copy()
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / np.where(np.abs(d) < tiny, tiny, d)
            c = 1.0 + numerator / c
            c = np.where(np.abs(c) < tiny, tiny, c)
            h = h * c * d
        if np.all(np.abs(c * d - 1.0) < 1e-15):
            break
    with np.errstate(divide="ignore"):
        log_front = (
            a * np.log(x) + b * np.log1p(-x) - (_log_gamma(a) + _log_gamma(b) - _log_gamma(a + b))
        )
    value = np.exp(log_front) * h / a
    value = np.where(x <= 0.0, 0.0, value)
    return np.where(flip, 1.0 - value, value)


def t_sf(t: np.ndarray | float, df: np.ndarray | float) -> np.ndarray:
    """P(T > t) for Student's t with df degrees of freedom (df may be fractional)."""
    t = np.asarray(t, dtype=float)
    df = np.minimum(np.asarray(df, dtype=float), MAX_DF)
    tail = 0.5 * _betainc(df / 2.0, np.full_like(df, 0.5), df / (df + t * t))
    return np.where(t > 0, tail, 1.0 - tail)


def _t_pdf(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    log_norm = _log_gamma((df + 1) / 2) - _log_gamma(df / 2) - 0.5 * np.log(df * math.pi)
    return np.exp(log_norm - (df + 1) / 2 * np.log1p(t * t / df))


def t_isf(p: float, df: np.ndarray | float) -> np.ndarray:
    """The t with P(T > t) = p, for 0 < p < 1/2.

    Newton's method from the left: for t > 0 the survival function is convex and decreasing,
    so steps from a point below the root never overshoot it. The start is the Cornish-Fisher
    expansion when it lies below the root, else the normal quantile (always below it).
    """
    df = np.minimum(np.asarray(df, dtype=float), MAX_DF)
    z = NormalDist().inv_cdf(1.0 - p)
    guess = (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )
    t = np.where(t_sf(guess, df) >= p, guess, z)
    active = np.ones(t.shape, dtype=bool)
    for _ in range(200):
        step = (t_sf(t[active], df[active]) - p) / _t_pdf(t[active], df[active])
        t[active] += np.maximum(step, 0.0)
        still = step > 1e-13 * np.maximum(t[active], 1.0)
        if not still.any():
            break
        active[active] = still
    return t


# ----------------------------------------------------------------------------------------------
# The test on log round medians, vectorised so the simulation tests run the same code
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogRatioTest:
    """Arrays, one entry per layer: the log ratio, its interval and p-value for "> log(1+T)"."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    p_regressed: np.ndarray
    df: np.ndarray


def log_ratio_test(
    log_base: Sequence[np.ndarray] | np.ndarray,
    log_current: Sequence[np.ndarray] | np.ndarray,
    log_threshold: np.ndarray | float,
    level: float = 0.99,
) -> LogRatioTest:
    """Welch's t test and interval for mean(log_current) - mean(log_base), per layer.

    log_base / log_current: a 2-D array (layers x rounds) or a list of 1-D arrays of
    possibly different lengths (each at least MIN_ROUNDS long).
    """

    def moments(values: Sequence[np.ndarray] | np.ndarray) -> tuple[np.ndarray, ...]:
        if isinstance(values, np.ndarray) and values.ndim >= 2:
            n = np.full(values.shape[:-1], values.shape[-1], dtype=float)
            return values.mean(-1), values.var(-1, ddof=1) / n, n
        arrays = [np.asarray(v, dtype=float) for v in values]
        n = np.array([len(v) for v in arrays], dtype=float)
        return (
            np.array([v.mean() for v in arrays]),
            np.array([v.var(ddof=1) for v in arrays]) / n,
            n,
        )

    mean_b, se2_b, n_b = moments(log_base)
    mean_c, se2_c, n_c = moments(log_current)
    estimate = mean_c - mean_b
    se2 = se2_b + se2_c
    degenerate = se2 <= 0.0  # identical rounds on both sides: the interval is a point
    safe = np.where(degenerate, 1.0, se2)
    df = safe**2 / (se2_b**2 / (n_b - 1) + se2_c**2 / (n_c - 1) + degenerate)
    se = np.sqrt(safe)
    half = np.where(degenerate, 0.0, t_isf((1.0 - level) / 2.0, df) * se)
    log_threshold = np.broadcast_to(np.asarray(log_threshold, dtype=float), estimate.shape)
    p = t_sf((estimate - log_threshold) / se, df)
    p = np.where(degenerate, np.where(estimate > log_threshold, 0.0, 1.0), p)
    return LogRatioTest(
        estimate, estimate - half, estimate + half, p, np.where(degenerate, np.inf, df)
    )


def classify(low: np.ndarray, high: np.ndarray, log_threshold: np.ndarray | float) -> np.ndarray:
    """Verdict codes from interval bounds (log scale): 0 OK, 1 REGRESSED, -1 IMPROVED, 2 INCONCLUSIVE."""
    low, high = np.asarray(low), np.asarray(high)
    log_threshold = np.broadcast_to(np.asarray(log_threshold, dtype=float), low.shape)
    codes = np.full(low.shape, 2, dtype=np.int8)
    codes[(low >= -log_threshold) & (high <= log_threshold)] = 0
    codes[low > log_threshold] = 1
    codes[high < -log_threshold] = -1
    return codes


def benjamini_hochberg(p_values: np.ndarray, q: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Step-up Benjamini-Hochberg along the last axis: (significant mask, adjusted p-values)."""
    p = np.asarray(p_values, dtype=float)
    m = p.shape[-1]
    if m == 0:
        return np.zeros(p.shape, dtype=bool), p.copy()
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * m / np.arange(1, m + 1)
    ranked = np.minimum.accumulate(ranked[..., ::-1], axis=-1)[..., ::-1]
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, np.minimum(ranked, 1.0), axis=-1)
    return adjusted <= q, adjusted
