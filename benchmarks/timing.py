"""The one timer of the benchmarks: opbench's own (`opbench.measure.timer.time_callable`), the timer
`opbench run` times every layer with. On CUDA the L2 is flushed and the stream held before every
timed call (outside the events); on the CPU (`--tiny`) it is perf_counter, and the figures of an
interpreted Triton kernel mean nothing: the tiny mode checks the script's plumbing only.
"""

from __future__ import annotations

from collections.abc import Callable

from opbench.measure.timer import time_callable
from opbench.results.stats import median
from opbench.spec.model import TimingSpec

# A fixed schedule, sample for sample comparable between the columns of one table: 25 ms of
# warm-up, then 5 rounds of 100 ms.
SCHEDULE = TimingSpec(warmup_ms=25.0, rep_ms=100.0, rounds=5)
TINY = SCHEDULE.quick()


def median_ms(fn: Callable[[], object], device: str, tiny: bool = False) -> float:
    """The median of fn's timed calls, in ms (every sample of every round)."""
    measured = time_callable(fn, TINY if tiny else SCHEDULE, device)
    return median([t for one in measured.rounds for t in one])
