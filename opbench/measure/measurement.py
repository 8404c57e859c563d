"""What a timer returns: the samples by round, and what else it learned about the call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    """rounds: every timed sample (ms), grouped by round.
    timer: "cuda-events", "cuda-graph" or "perf_counter".
    host_ms: median host time to issue one call (no synchronisation in the loop).
    stream_ms: median time per call of back-to-back calls without a flush.
    stop_reason: why sampling stopped (`stopping.STOP_*`).
    warning: why the samples may not be trusted (pre-emption, load), else None.
    hold_ms: the GPU-side hold before each timed call (CUDA only)."""

    rounds: tuple[tuple[float, ...], ...]
    timer: str
    host_ms: float | None = None
    stream_ms: float | None = None
    stop_reason: str | None = None
    warning: str | None = None
    hold_ms: float | None = None
