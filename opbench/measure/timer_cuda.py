"""The CUDA timer: events around each call, L2 flushed and the stream held before it.

Why the hold: the host issues flush, start event, call, end event. If the call spends longer
on the host before its kernel is launched than the flush keeps the GPU busy, the start event
fires while the GPU waits for the host, and host time is counted as device time. A short
GPU-side spin enqueued after the flush and before the start event, longer than the call's
host time (measured first), keeps the stream busy until the kernel is queued, so the events
bracket only the device work. Host time is reported separately, as `host_ms`.

The timing loop is written against `StreamOps` so that a CPU test can drive it with a simulated
stream and check the mechanics; `CudaStream` is the real one.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from opbench.measure.measurement import Measurement
from opbench.measure.stopping import take_samples
from opbench.results.stats import quantile
from opbench.spec.model import TimingSpec

# Bytes written to evict L2 between calls; twice the largest L2 of current GPUs (H200: 60 MB).
DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024
# The hold outlasts the slowest usual host time of one call by this factor and margin (the
# margin covers recording the start event); capped because a call that needs more is
# host-bound whatever the hold does, and host_ms says so.
HOLD_FACTOR = 1.5
HOLD_MARGIN_MS = 0.02
MAX_HOLD_MS = 5.0
# Back-to-back calls that measure host_ms and stream_ms: about this much device time per
# window, between these many calls (a few hundred launches stay far below the launch queue).
STREAM_WINDOW_MS = 5.0
STREAM_CALLS = (3, 200)
MIN_WARMUP_SAMPLES = 2


class Event(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...


class StreamOps(Protocol):
    def event(self) -> Event: ...

    def synchronize(self) -> None: ...

    def flush(self) -> None: ...

    def hold(self, ms: float) -> None: ...


def hold_for(host_ms_p90: float) -> float:
    """GPU-side hold (ms) that outlasts the host time of one call."""
    return min(MAX_HOLD_MS, HOLD_FACTOR * host_ms_p90 + HOLD_MARGIN_MS)


def launch_costs(
    call: Callable[[], Any], ops: StreamOps, estimate_ms: float, clock: Callable[[], float]
) -> tuple[float, float, float]:
    """(host_ms median, stream_ms median, host_ms 90th percentile) from back-to-back calls."""
    lo, hi = STREAM_CALLS
    calls = max(lo, min(hi, int(STREAM_WINDOW_MS / max(estimate_ms, 1e-3))))
    windows = 3 if estimate_ms * calls <= 2 * STREAM_WINDOW_MS else 1
    host: list[float] = []
    stream: list[float] = []
    for _ in range(windows):
        ops.synchronize()
        start, end = ops.event(), ops.event()
        start.record()
        for _ in range(calls):
            t = clock()
            call()
            host.append((clock() - t) * 1e3)
        end.record()
        ops.synchronize()
        stream.append(start.elapsed_time(end) / calls)
    host.sort()
    return quantile(host, 0.5), quantile(sorted(stream), 0.5), quantile(host, 0.9)


def time_stream(
    call: Callable[[], Any],
    timing: TimingSpec,
    ops: StreamOps,
    timer: str = "cuda-events",
    clock: Callable[[], float] = time.perf_counter,
    hold: bool = True,
) -> Measurement:
    """Time `call` on a stream: per sample flush → hold → start event → call → end event."""
    call()
    ops.synchronize()
    start, end = ops.event(), ops.event()
    start.record()
    call()
    end.record()
    ops.synchronize()
    estimate_ms = start.elapsed_time(end)
    host_ms, stream_ms, host_p90 = launch_costs(call, ops, estimate_ms, clock)
    hold_ms = hold_for(host_p90) if hold else 0.0

    def sample(start: Event, end: Event) -> None:
        ops.flush()
        if hold_ms > 0:
            ops.hold(hold_ms)
        start.record()
        call()
        end.record()

    # Warm-up by time; its wall time per sample (flush, hold and launch included) sizes rounds.
    warm_start = clock()
    deadline = warm_start + timing.warmup_ms / 1e3
    count = 0
    while count < MIN_WARMUP_SAMPLES or clock() < deadline:
        sample(start, end)
        count += 1
    ops.synchronize()
    sample_wall_ms = (clock() - warm_start) * 1e3 / count

    def take_round(calls: int) -> Sequence[float]:
        starts = [ops.event() for _ in range(calls)]
        ends = [ops.event() for _ in range(calls)]
        for s, e in zip(starts, ends, strict=True):
            sample(s, e)
        ops.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    sampled = take_samples(take_round, sample_wall_ms, timing, clock)
    return Measurement(
        sampled.rounds,
        timer,
        host_ms=host_ms,
        stream_ms=stream_ms,
        stop_reason=sampled.stop_reason,
        hold_ms=hold_ms,
    )


def flush_buffer(device: str, nbytes: int | None = None):
    import torch

    if nbytes is None:
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or 0
        nbytes = max(DEFAULT_FLUSH_BYTES, 4 * l2)
    return torch.empty(nbytes, dtype=torch.int8, device=device)


@functools.cache
def cycles_per_ms(device: str) -> float:
    """GPU clock cycles per millisecond of `torch.cuda._sleep`, measured once per device."""
    import torch

    cycles = 20_000_000  # about 10 ms at 2 GHz: long enough that launch jitter is noise
    with torch.cuda.device(torch.device(device)):
        torch.cuda._sleep(1000)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        return cycles / start.elapsed_time(end)


class CudaStream:
    """StreamOps on the current CUDA stream."""

    def __init__(self, device: str, flush_l2: bool) -> None:
        self.cache = flush_buffer(device) if flush_l2 else None
        self.cycles_per_ms = cycles_per_ms(device)

    def event(self) -> Event:
        import torch

        return torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def flush(self) -> None:
        if self.cache is not None:
            self.cache.zero_()

    def hold(self, ms: float) -> None:
        import torch

        torch.cuda._sleep(max(1, int(ms * self.cycles_per_ms)))


def time_cuda(
    fn: Callable[[], Any], timing: TimingSpec, device: str = "cuda", hold: bool = True
) -> Measurement:
    ops = CudaStream(device, timing.flush_l2)
    if timing.cuda_graph:
        return time_stream(graph_replay(fn), timing, ops, "cuda-graph", hold=hold)
    return time_stream(fn, timing, ops, "cuda-events", hold=hold)


def graph_replay(fn: Callable[[], Any]) -> Callable[[], Any]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay
