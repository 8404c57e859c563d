"""The CPU timer: perf_counter around each call, rounds sized and stopped like the CUDA timer.

Nothing but the call sits inside the timed region (the CPU has no L2 flush to do). A CPU shared
with other processes pre-empts the timed one; rather than report such figures as if they were
clean, the measurement carries a warning when the samples' spread or the load says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from opbench.measure.measurement import Measurement
from opbench.measure.stopping import STOP_ROUNDS, preemption_warning, take_samples
from opbench.results.stats import quantile
from opbench.spec.model import TimingSpec

# Back-to-back calls that measure host_ms and stream_ms (and size the rounds): this much wall
# time at most, between these many calls.
STREAM_WINDOW_MS = 5.0
STREAM_CALLS = (1, 1000)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads() -> int:
    """Threads for CPU timing unless --threads says otherwise: OMP_NUM_THREADS when set, else
    half the usable cores (at most 8). An OpenMP team as wide as the machine stalls for whole
    scheduler slices whenever another process holds one of its cores (seen: 0.017 ms layers
    read 8 ms on a loaded 2-core machine); half leaves room for the OS and neighbours."""
    try:
        asked = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        asked = 0
    if asked >= 1:
        return asked
    return max(1, min(8, usable_cores() // 2))


def load_warning() -> str | None:
    """A warning when the 1-minute load average exceeds the cores this process may use."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cores = usable_cores()
    return f"loaded: load {load:.1f} > {cores} cores" if load > cores else None


def back_to_back(
    fn: Callable[[], Any], clock: Callable[[], float], first_ms: float
) -> tuple[float, float]:
    """(host_ms, stream_ms): median of per-call times, and the mean per call, of back-to-back
    calls. A call slower than the window (interpreted Triton) is not repeated: its first call
    stands for both."""
    lo, hi = STREAM_CALLS
    if first_ms >= STREAM_WINDOW_MS:
        return first_ms, first_ms
    per_call: list[float] = []
    start = clock()
    while len(per_call) < lo or (len(per_call) < hi and (clock() - start) * 1e3 < STREAM_WINDOW_MS):
        t = clock()
        fn()
        per_call.append((clock() - t) * 1e3)
    total_ms = (clock() - start) * 1e3
    return quantile(sorted(per_call), 0.5), total_ms / len(per_call)


def time_cpu(
    fn: Callable[[], Any], timing: TimingSpec, clock: Callable[[], float] = time.perf_counter
) -> Measurement:
    start = clock()
    fn()
    first_ms = (clock() - start) * 1e3
    warm_until = clock() + timing.warmup_ms / 1e3
    while clock() < warm_until:
        fn()
    host_ms, stream_ms = back_to_back(fn, clock, first_ms)

    def take_round(calls: int) -> Sequence[float]:
        samples = []
        for _ in range(calls):
            s = clock()
            fn()
            samples.append((clock() - s) * 1e3)
        return samples

    sampled = take_samples(take_round, stream_ms, timing, clock)
    warnings = [w for w in (preemption_warning(sampled.rounds), load_warning()) if w]
    return Measurement(
        sampled.rounds,
        "perf_counter",
        host_ms=host_ms,
        stream_ms=stream_ms,
        stop_reason=sampled.stop_reason,
        warning="; ".join(warnings) or None,
    )


def time_once(fn: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> Measurement:
    """One call, timed: its time is the one sample, the host and the stream time. For
    interpreted Triton, whose rows are checked but never read as performance figures: more
    calls would only repeat the interpreter's slowest part."""
    start = clock()
    fn()
    ms = (clock() - start) * 1e3
    return Measurement(((ms,),), "perf_counter", host_ms=ms, stream_ms=ms, stop_reason=STOP_ROUNDS)
