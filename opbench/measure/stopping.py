"""How many samples to take: rounds sized by wall time, and when to stop.

Pure Python (no torch), shared by the CUDA and the CPU timer, and tested with a fake clock.

A fixed schedule (`timing.rounds` set, or `--rounds`) takes exactly that many rounds of equal
size. An adaptive one takes rounds until the 95% confidence interval of the median is within
±target_ci, after at least `min_ms` of wall time and MIN_ADAPTIVE_ROUNDS rounds, or until
`max_ms` runs out. Either way every sample is kept, grouped by round, so the gate (which works
on round medians) reads adaptive runs exactly as it reads fixed ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opbench.results.stats import median, median_confidence_interval
from opbench.spec.model import TimingSpec

MAX_CALLS_PER_ROUND = 20_000
# The gate judges a layer only with 5 rounds a side (compare/gate_model.MIN_ROUNDS: 2 give a
# variance but miss the offsets between runs); 5 also give the between-round test below a
# usable t quantile. A run out of time still takes that many rounds, so the gate can judge it.
MIN_ADAPTIVE_ROUNDS = 5
MIN_ROUNDS_FOR_GATE = 5

STOP_ROUNDS = "rounds"  # the fixed schedule ran out
STOP_TARGET = "target_ci"  # the interval of the median is within ±target_ci
STOP_MAX_TIME = "max_time"  # the wall-time budget ran out first

# Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = 1.959963984540054

# A CPU result whose round medians differ by more than this factor was very likely pre-empted
# (its process descheduled for part of the rounds): a quiet machine repeats within a few percent.
PREEMPTED_ROUND_RATIO = 1.5
PREEMPTED_IQR = 0.5  # or whose samples spread this widely around their median
PREEMPTED = "pre-empted?"
# What a result's note starts a timing warning with (here and in timer_cpu.load_warning).
WARNING_MARKERS = (PREEMPTED, "loaded:")


@dataclass(frozen=True)
class Sampled:
    rounds: tuple[tuple[float, ...], ...]
    stop_reason: str


def calls_per_round(sample_wall_ms: float, rep_ms: float) -> int:
    """Calls that fill one round of `rep_ms`, from the wall time of one sample (flush included)."""
    if sample_wall_ms <= 0:
        return MAX_CALLS_PER_ROUND
    return max(1, min(MAX_CALLS_PER_ROUND, int(rep_ms / sample_wall_ms)))


def t975(df: int) -> float:
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975  # Cornish-Fisher: within 1e-3 of the exact quantile beyond 30 df
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def interval_is_tight(rounds: Sequence[Sequence[float]], target: float) -> bool:
    """The 95% interval of the median is within ±target, both over all samples (order
    statistics) and between rounds (t interval on log round medians, what the gate uses),
    so that a drift from round to round (clocks, heat) keeps sampling going."""
    samples = sorted(t for r in rounds for t in r)
    if len(rounds) < 2 or not samples:
        return False
    mid = median(samples)
    if mid <= 0:
        return False
    lo, hi = median_confidence_interval(samples, 0.95)
    if max(mid - lo, hi - mid) > target * mid:
        return False
    logs = [math.log(m) for m in (median(r) for r in rounds if r) if m > 0]
    n = len(logs)
    if n < 2:
        return False
    mean = sum(logs) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in logs) / (n - 1))
    return t975(n - 1) * sd / math.sqrt(n) <= math.log1p(target)


def take_samples(
    take_round: Callable[[int], Sequence[float]],
    sample_wall_ms: float,
    timing: TimingSpec,
    clock: Callable[[], float] = time.perf_counter,
) -> Sampled:
    """Run rounds of `take_round(calls)` (which returns one time per call) under `timing`.

    sample_wall_ms: wall time of one sample from the warm-up, flush and launch included, which
    sizes the rounds. An adaptive run resizes after its first round from what it really took."""
    per_round = calls_per_round(sample_wall_ms, timing.rep_ms)
    if timing.rounds is not None:
        rounds = tuple(tuple(take_round(per_round)) for _ in range(timing.rounds))
        return Sampled(rounds, STOP_ROUNDS)
    start = clock()
    taken: list[tuple[float, ...]] = []
    while True:
        round_start = clock()
        taken.append(tuple(take_round(per_round)))
        now = clock()
        if len(taken) == 1:
            per_round = calls_per_round((now - round_start) * 1e3 / per_round, timing.rep_ms)
        elapsed_ms = (now - start) * 1e3
        if (
            len(taken) >= MIN_ADAPTIVE_ROUNDS
            and elapsed_ms >= min(timing.min_ms, timing.max_ms)
            and interval_is_tight(taken, timing.target_ci)
        ):
            return Sampled(tuple(taken), STOP_TARGET)
        if elapsed_ms >= timing.max_ms and len(taken) >= MIN_ROUNDS_FOR_GATE:
            return Sampled(tuple(taken), STOP_MAX_TIME)


def preemption_warning(rounds: Sequence[Sequence[float]]) -> str | None:
    """Why these CPU samples look pre-empted, or None when their spread looks like a quiet run."""
    meds = [median(r) for r in rounds if r]
    samples = sorted(t for r in rounds for t in r)
    if not samples or samples[len(samples) // 2] <= 0:
        return None
    if len(meds) >= 2 and min(meds) > 0 and max(meds) / min(meds) > PREEMPTED_ROUND_RATIO:
        return f"{PREEMPTED} round medians differ {max(meds) / min(meds):.1f}×"
    n = len(samples)
    if n >= 8:
        q1, q3, mid = samples[n // 4], samples[(3 * n) // 4], samples[n // 2]
        if (q3 - q1) / mid > PREEMPTED_IQR:
            return f"{PREEMPTED} samples spread {100 * (q3 - q1) / mid:.0f}% (IQR/median)"
    return None
