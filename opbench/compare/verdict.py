"""Speedups with intervals, and the verdict of one backend on one comparison row.

    speedup = reference_ms / opbench_ms
    interval = [reference_lo / opbench_hi, reference_hi / opbench_lo]
    PASS          the lower bound >= target
    FAIL          the upper bound < target, or the output was incorrect; where the match is
                  ambiguous, only a row below target however its reference time is shared
                  out (best_case_speedup)
    UNCERTAIN     otherwise; also whenever the match is ambiguous, the reference has no time,
                  or its time is a prefix difference within its noise (or inflated by a
                  prefix that fell below the one before it)
    ERROR         the layer crashed, or was timed with no samples (exit 3)
    NOT-MEASURED  timed in Triton's CPU interpreter, or on the CPU against a GPU engine; or
                  not timed at all: not in this run (--layer, --model, a shard, interrupted),
                  or unsupported by the backend
    MISSING       (rows.py) no reference row covers the layer

opbench's interval is the distribution-free 95% interval of the median (TimingStats.ci95);
the reference's is its min/max, widened to time ± 1.96 × noise_ms where the reader gives a
standard deviation (a std column; for prefix differences, that of the difference), else a
point. Sums of several results or reference rows add their bounds (conservative).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from opbench.compare.model import BackendTiming, Interval, Verdict
from opbench.match.links import GUESS
from opbench.reference.model import ReferenceTiming, RefStatus, TimeKind
from opbench.results.model import LayerResult, Status

# A 95% interval of a normally distributed value is its mean ± 1.96 standard deviations.
Z95 = 1.96

INTERPRETED = "timed in Triton's CPU interpreter: not a performance figure"


def reference_interval(row: ReferenceTiming) -> Interval | None:
    """A reference row's time with its spread: min/max, and time ± 1.96 noise where known.
    A measured time is never below zero; a prefix difference (DERIVED) may be. None when the
    row has no time: none given, or a measured time of zero or less (a file cut mid-number,
    an engine that rounded the layer away), which no speed-up can be judged against."""
    t = row.time_ms
    if t is None or not math.isfinite(t):
        return None
    if t <= 0 and row.time_kind != TimeKind.DERIVED:
        return None
    lo = hi = t
    if row.min_ms is not None:
        lo = min(lo, row.min_ms)
    if row.max_ms is not None:
        hi = max(hi, row.max_ms)
    if row.noise_ms is not None:
        lo = min(lo, t - Z95 * abs(row.noise_ms))
        hi = max(hi, t + Z95 * abs(row.noise_ms))
    if row.time_kind != TimeKind.DERIVED:
        lo = max(lo, 0.0)
    return Interval(t, lo, hi)


def group_reference(rows: Sequence[ReferenceTiming]) -> Interval | None:
    """The summed time of the reference rows a comparison row stands on; None when one of its
    timed rows has no time (the sum of the others would understate the reference)."""
    intervals = [reference_interval(r) for r in rows]
    if any(i is None and r.status == RefStatus.TIMED for i, r in zip(intervals, rows, strict=True)):
        return None
    return sum_intervals(i for i in intervals if i is not None)


def result_interval(result: LayerResult) -> Interval | None:
    stats = result.stats
    if stats is None:
        return None
    lo, hi = stats.ci95
    return Interval(stats.median, lo, hi)


def speedup_interval(reference: Interval, opbench: Interval) -> Interval:
    """reference / opbench; a reference bound below zero counts as zero (no speed-up)."""

    def ratio(a: float, b: float) -> float:
        return max(a, 0.0) / b if b > 0 else math.inf

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


def _sum_optional(values: Iterable[float | None]) -> float | None:
    values = list(values)
    return None if not values or any(v is None for v in values) else sum(values)  # type: ignore[arg-type]


# ---- one row, one backend ---------------------------------------------------------------------


def incorrect_reason(result: LayerResult) -> str:
    """ "incorrect: <layer>: <every failed check>", from the result's own reasons."""
    corr = result.correctness
    if corr is None:
        return f"incorrect: {result.layer} was not checked against a reference"
    return f"incorrect: {result.layer}: {'; '.join(corr.reasons)}"


@dataclass(frozen=True)
class RowContext:
    """What a row's verdict depends on beyond its results.

    reference: the rows' summed time and interval (None: the reference has no time).
    target: the speed-up to reach.
    doubt: why the match is ambiguous (PASS and FAIL become UNCERTAIN), else None.
    noise: why the reference time is inside its own noise (UNCERTAIN), else None.
    gpu_reference: the reference engine ran on a GPU and CPU times may not be judged.
    """

    reference: Interval | None
    target: float
    doubt: str | None = None
    noise: str | None = None
    gpu_reference: bool = False


def backend_timing(
    backend: str, layers: Sequence[str], results: Sequence[LayerResult], context: RowContext
) -> BackendTiming:
    """The verdict of one backend on one row, from the results covering the row's layers."""
    covered = {member for r in results for member in r.members}
    missing = [layer for layer in layers if layer not in covered]
    if missing:
        return BackendTiming(
            backend,
            Verdict.NOT_MEASURED,
            reason=f"not in this run: no {backend} result for {', '.join(missing)}",
        )
    # a crash is ERROR; a layer the backend does not support was never timed: NOT-MEASURED
    not_ok = sorted((r for r in results if not r.ran), key=lambda r: r.status != Status.ERROR)
    if not_ok:
        r = not_ok[0]
        crashed = r.status == Status.ERROR
        return BackendTiming(
            backend,
            Verdict.ERROR if crashed else Verdict.NOT_MEASURED,
            reason=f"{r.layer}: {r.status}{'' if crashed else f' by {backend}'}: "
            f"{r.message or 'no message'}",
            results=len(results),
        )
    intervals = [result_interval(r) for r in results]
    if any(i is None for i in intervals):
        return BackendTiming(
            backend, Verdict.ERROR, reason="no timing samples", results=len(results)
        )
    time = sum_intervals(i for i in intervals if i is not None)
    assert time is not None
    common = _measured(results, time)
    reference = context.reference
    speedup = (
        speedup_interval(reference, time) if reference is not None and reference.value > 0 else None
    )
    incorrect = [r for r in results if not r.correct]
    if incorrect:
        return BackendTiming(
            backend, Verdict.FAIL, speedup=speedup, reason=incorrect_reason(incorrect[0]), **common
        )
    if common["interpreted"]:
        return BackendTiming(
            backend, Verdict.NOT_MEASURED, speedup=speedup, reason=INTERPRETED, **common
        )
    if context.gpu_reference and any(r.device == "cpu" for r in results):
        return BackendTiming(
            backend,
            Verdict.NOT_MEASURED,
            speedup=speedup,
            reason="timed on the CPU against a GPU engine (--allow-cpu-times to judge anyway)",
            **common,
        )
    if context.noise is not None:
        return BackendTiming(
            backend, Verdict.UNCERTAIN, speedup=speedup, reason=context.noise, **common
        )
    if speedup is None:
        return BackendTiming(
            backend, Verdict.UNCERTAIN, reason="the reference has no time for this row", **common
        )
    verdict = verdict_of(speedup, context.target)
    if context.doubt is None:
        return BackendTiming(backend, verdict, speedup=speedup, **common)
    assert reference is not None  # a speed-up was computed from it
    best = best_case_speedup(reference, [i for i in intervals if i is not None], context.doubt)
    if best is not None and best < context.target:
        reason = (
            f"below target however the reference rows are shared out: at best {best:.3g}× "
            f"(all of their time against the fastest result alone); {context.doubt}"
        )
        return BackendTiming(backend, Verdict.FAIL, speedup=speedup, reason=reason, **common)
    return BackendTiming(
        backend, Verdict.UNCERTAIN, speedup=speedup, reason=context.doubt, **common
    )


def best_case_speedup(reference: Interval, times: Sequence[Interval], doubt: str) -> float | None:
    """The highest speed-up an ambiguous cover allows: the reference rows' highest time all
    spent on the row's fastest result alone. Every doubt of a cover but one leaves the rows
    covering at least one of the row's results and at most the work they hold (a fused row
    holding work no layer stands for, a span of layers, a name fitting several layers, a
    guessed activation), so a row below target even then FAILs whatever the cover. A link
    guessed by position and op type may pair the row with another layer's work altogether:
    no bound (None)."""
    if GUESS in doubt:
        return None
    fastest = min(t.lo for t in times)
    return max(reference.hi, 0.0) / fastest if fastest > 0 else math.inf


def _measured(results: Sequence[LayerResult], time: Interval) -> dict[str, Any]:
    """Everything a timing shows besides its verdict, from the results it sums."""
    flops = sum(r.flops for r in results)
    nbytes = sum(r.bytes for r in results)
    corrs = [r.correctness for r in results if r.correctness is not None]
    devices = {r.device for r in results}
    return dict(
        time=time,
        results=len(results),
        correct=all(r.correct for r in results),
        rel_l2=max((c.rel_l2 for c in corrs), default=None),
        tflops=flops / time.value / 1e9 if flops and time.value > 0 else None,
        gbps=nbytes / time.value / 1e6 if nbytes and time.value > 0 else None,
        interpreted=any(r.interpreted for r in results),
        device=devices.pop() if len(devices) == 1 else None,
        launch_bound=any(r.launch_bound for r in results),
        host_ms=_sum_optional(r.host_ms for r in results),
        stream_ms=_sum_optional(r.stream_ms for r in results),
        loose_tolerance=any(c.loose_tolerance for c in corrs),
        failures=tuple(f for c in corrs for f in c.failures),
    )
