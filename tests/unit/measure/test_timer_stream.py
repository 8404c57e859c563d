"""The CUDA timer's mechanics on a simulated stream (no GPU): the hold before the start event
keeps host time out of device time, and host_ms / stream_ms show the host cost instead.

The simulation follows CUDA's rules: work runs on the stream in issue order, each item starting
when the host has issued it and the previous item has finished; an event's timestamp is the
moment the stream reaches it; synchronize() makes the host wait for the stream.
"""

from __future__ import annotations

import pytest

from opbench.measure.stopping import STOP_TARGET
from opbench.measure.timer_cuda import HOLD_FACTOR, HOLD_MARGIN_MS, time_stream
from opbench.results.model import LayerResult
from opbench.spec.model import TimingSpec

LAUNCH_MS = 0.005  # host cost of issuing one kernel or event
FLUSH_MS = 0.065  # the 256 MiB flush on an H200
HOST_DELAY_MS = 0.2  # the test layer's host work before its launch
KERNEL_MS = 0.01  # the test layer's kernel


class SimEvent:
    def __init__(self, sim: SimStream) -> None:
        self.sim, self.at = sim, None

    def record(self) -> None:
        self.at = self.sim.issue("event", 0.0)

    def elapsed_time(self, end: SimEvent) -> float:
        return end.at - self.at


class SimStream:
    def __init__(self) -> None:
        self.host = 0.0  # ms
        self.stream_free = 0.0
        self.log: list[str] = []

    def clock(self) -> float:
        return self.host / 1e3

    def issue(self, name: str, device_ms: float) -> float:
        start = max(self.host, self.stream_free)
        self.stream_free = start + device_ms
        self.host += LAUNCH_MS
        self.log.append(name)
        return start

    # StreamOps
    def event(self) -> SimEvent:
        return SimEvent(self)

    def synchronize(self) -> None:
        self.host = max(self.host, self.stream_free)

    def flush(self) -> None:
        self.issue("flush", FLUSH_MS)

    def hold(self, ms: float) -> None:
        self.issue("hold", ms)

    def host_delayed_layer(self) -> None:
        self.host += HOST_DELAY_MS
        self.issue("kernel", KERNEL_MS)


TIMING = TimingSpec(warmup_ms=5, rep_ms=20, min_ms=100, max_ms=1000, flush_l2=True)


def test_the_hold_keeps_host_time_out_of_device_time() -> None:
    sim = SimStream()
    m = time_stream(sim.host_delayed_layer, TIMING, sim, clock=sim.clock)
    samples = [t for r in m.rounds for t in r]
    assert samples and all(t == pytest.approx(KERNEL_MS) for t in samples)
    assert m.stop_reason == STOP_TARGET
    host = HOST_DELAY_MS + LAUNCH_MS
    assert m.host_ms == pytest.approx(host)
    assert m.hold_ms == pytest.approx(HOLD_FACTOR * host + HOLD_MARGIN_MS)
    # Back to back, the layer costs its host time: the GPU waits for Python.
    assert m.stream_ms == pytest.approx(host, rel=0.05)


def test_without_the_hold_the_host_delay_leaks_into_device_time() -> None:
    """The control: the same layer timed with flush only reads its host time, not its kernel."""
    sim = SimStream()
    m = time_stream(sim.host_delayed_layer, TIMING, sim, clock=sim.clock, hold=False)
    samples = sorted(t for r in m.rounds for t in r)
    assert samples[len(samples) // 2] > 10 * KERNEL_MS


def test_every_timed_call_is_flush_hold_start_call_end() -> None:
    sim = SimStream()
    time_stream(sim.host_delayed_layer, TIMING, sim, clock=sim.clock)
    timed = sim.log[sim.log.index("flush") :]
    pattern = ["flush", "hold", "event", "kernel", "event"]
    assert len(timed) % len(pattern) == 0
    assert all(timed[i : i + 5] == pattern for i in range(0, len(timed), 5))


def test_a_fast_host_gives_a_short_hold_and_no_launch_bound_flag() -> None:
    sim = SimStream()

    def device_bound_layer() -> None:
        sim.issue("kernel", 0.5)

    m = time_stream(device_bound_layer, TIMING, sim, clock=sim.clock)
    assert m.host_ms == pytest.approx(LAUNCH_MS)
    assert m.hold_ms < 0.05
    assert m.stream_ms == pytest.approx(0.5, rel=0.02)
    result = LayerResult(
        "m", "l", "op", "triton", "ok", "float16", (1,), (1,),
        samples_ms=m.rounds, host_ms=m.host_ms, stream_ms=m.stream_ms,
    )  # fmt: skip
    assert not result.launch_bound


def test_the_host_delayed_layer_is_flagged_launch_bound() -> None:
    sim = SimStream()
    m = time_stream(sim.host_delayed_layer, TIMING, sim, clock=sim.clock)
    result = LayerResult(
        "m", "l", "op", "triton", "ok", "float16", (1,), (1,),
        samples_ms=m.rounds, host_ms=m.host_ms, stream_ms=m.stream_ms,
    )  # fmt: skip
    assert result.launch_bound
