"""Time a zero-argument callable, the way a GPU kernel should be timed.

On CUDA (timer_cuda): before every timed call the L2 is flushed and the stream is held by a
short GPU-side spin, both outside the events, so the start event fires only once the call's
kernels are already queued: the device time carries no host time. Beside it, the median host
time to issue one call (`host_ms`) and the time per call of back-to-back calls without a flush
(`stream_ms`). Optionally the call is captured once in a CUDA graph and the graph is replayed.

On the CPU (timer_cpu): perf_counter with the same structure, and a warning when the samples
look pre-empted or the machine is loaded. Interpreted Triton is timed by one call
(timer_cpu.time_once, chosen by pipeline/measure.time_call); the caller marks those results as
not being performance figures.

Both size their rounds by wall time and stop by `stopping`: a fixed number of rounds, or
adaptively once the 95% interval of the median is tight. Every sample is kept, by round.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opbench.measure.measurement import Measurement
from opbench.measure.stopping import MAX_CALLS_PER_ROUND, calls_per_round
from opbench.measure.timer_cpu import time_cpu
from opbench.measure.timer_cuda import DEFAULT_FLUSH_BYTES, flush_buffer, time_cuda
from opbench.spec.model import TimingSpec

__all__ = [
    "DEFAULT_FLUSH_BYTES",
    "MAX_CALLS_PER_ROUND",
    "Measurement",
    "calls_per_round",
    "flush_buffer",
    "time_callable",
    "time_cpu",
    "time_cuda",
]


def time_callable(
    fn: Callable[[], Any], timing: TimingSpec, device: str, hold: bool = True
) -> Measurement:
    """hold=False leaves the host's time in the figure: a whole model issued eagerly from
    Python costs its host gaps too, which is what its end-to-end time must show."""
    if device.startswith("cuda"):
        return time_cuda(fn, timing, device, hold=hold)
    return time_cpu(fn, timing)
