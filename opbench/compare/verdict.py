"""Speedups with intervals, and the verdict of one backend on one comparison row.

    speedup = reference_ms / opbench_ms
    interval = [reference_lo / opbench_hi, reference_hi / opbench_lo]
    PASS       the lower bound >= target
    FAIL       the upper bound < target, or the output was incorrect
    UNCERTAIN  otherwise
    ERROR      the layer did not run (unsupported, error, missing, no samples)

opbench's interval is the distribution-free 95% interval of the median (TimingStats.ci95);
the reference's is its min/max or median ± noise where the file gives one, else a point.
Sums of several results or reference rows add their bounds (conservative).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from opbench.compare.model import BackendTiming, Interval, Verdict
from opbench.reference.model import ReferenceTiming
from opbench.results.model import LayerResult, Status


def reference_interval(row: ReferenceTiming) -> Interval | None:
    """A reference row's time with its spread: min/max and median ± noise where known."""
    t = row.time_ms
    if t is None:
        return None
    lo = hi = t
    if row.min_ms is not None:
        lo = min(lo, row.min_ms)
    if row.max_ms is not None:
        hi = max(hi, row.max_ms)
    if row.noise_ms is not None:
        lo = min(lo, t - abs(row.noise_ms))
        hi = max(hi, t + abs(row.noise_ms))
    return Interval(t, max(lo, 0.0), hi)


def result_interval(result: LayerResult) -> Interval | None:
    stats = result.stats
    if stats is None:
        return None
    lo, hi = stats.ci95
    return Interval(stats.median, lo, hi)


def speedup_interval(reference: Interval, opbench: Interval) -> Interval:
    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else math.inf

    return Interval(
        ratio(reference.value, opbench.value),
        ratio(reference.lo, opbench.hi),
        ratio(reference.hi, opbench.lo),
    )


def verdict_of(speedup: Interval, target: float) -> str:
    if speedup.lo >= target:
        return Verdict.PASS
    if speedup.hi < target:
        return Verdict.FAIL
    return Verdict.UNCERTAIN


def sum_intervals(intervals: Iterable[Interval]) -> Interval | None:
    total: Interval | None = None
    for interval in intervals:
        total = interval if total is None else total + interval
    return total


# ---- one row, one backend ---------------------------------------------------------------------


def _incorrect_reason(result: LayerResult) -> str:
    corr = result.correctness
    if corr is None:
        return f"incorrect: {result.layer} was not checked against a reference"
    if corr.nonfinite:
        return f"incorrect: {result.layer} has {corr.nonfinite} NaN/Inf values"
    return f"incorrect: {result.layer} rel_l2 {corr.rel_l2:.2e} > tolerance {corr.tolerance:.1e}"


def backend_timing(
    backend: str,
    layers: Sequence[str],
    results: Sequence[LayerResult],
    reference: Interval | None,
    target: float,
) -> BackendTiming:
    """The verdict of one backend on one row, from the results covering the row's layers."""
    covered = {member for r in results for member in r.members}
    missing = [layer for layer in layers if layer not in covered]
    if missing:
        return BackendTiming(
            backend, Verdict.ERROR, reason=f"no {backend} result for {', '.join(missing)}"
        )
    broken = [r for r in results if r.status != Status.OK]
    if broken:
        r = broken[0]
        return BackendTiming(
            backend,
            Verdict.ERROR,
            reason=f"{r.layer}: {r.status}: {r.message or 'no message'}",
            results=len(results),
        )
    intervals = [result_interval(r) for r in results]
    if any(i is None for i in intervals):
        return BackendTiming(
            backend, Verdict.ERROR, reason="no timing samples", results=len(results)
        )
    time = sum_intervals(i for i in intervals if i is not None)
    assert time is not None
    interpreted = any(r.interpreted for r in results)
    incorrect = [r for r in results if not r.correct]
    rel_l2 = max((r.correctness.rel_l2 for r in results if r.correctness), default=None)
    flops = sum(r.flops for r in results)
    nbytes = sum(r.bytes for r in results)
    rates = {
        "tflops": flops / time.value / 1e9 if flops and time.value > 0 else None,
        "gbps": nbytes / time.value / 1e6 if nbytes and time.value > 0 else None,
    }
    common = dict(
        time=time,
        results=len(results),
        correct=not incorrect,
        rel_l2=rel_l2,
        interpreted=interpreted,
        **rates,
    )
    if reference is None or reference.value <= 0:
        return BackendTiming(
            backend, Verdict.ERROR, reason="the reference has no time for this row", **common
        )
    speedup = speedup_interval(reference, time)
    if incorrect:
        return BackendTiming(
            backend, Verdict.FAIL, speedup=speedup, reason=_incorrect_reason(incorrect[0]), **common
        )
    return BackendTiming(backend, verdict_of(speedup, target), speedup=speedup, **common)
