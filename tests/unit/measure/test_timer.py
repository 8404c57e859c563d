"""The CPU timer on synthetic functions, and the statistics read from its samples."""

from __future__ import annotations

import time

import pytest

from opbench.measure.stopping import STOP_MAX_TIME, STOP_ROUNDS, STOP_TARGET
from opbench.measure.timer import MAX_CALLS_PER_ROUND, calls_per_round, time_callable, time_cpu
from opbench.results.stats import TimingStats
from opbench.spec.model import TimingSpec


class Counter:
    def __init__(self, sleep_s: float = 0.0) -> None:
        self.calls = 0
        self.sleep_s = sleep_s

    def __call__(self) -> None:
        self.calls += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)


def test_samples_are_grouped_by_rounds_and_every_call_is_kept() -> None:
    fn = Counter(0.002)
    m = time_cpu(fn, TimingSpec(warmup_ms=0, rep_ms=10, rounds=3))
    assert m.timer == "perf_counter" and m.stop_reason == STOP_ROUNDS
    assert len(m.rounds) == 3
    sizes = {len(r) for r in m.rounds}
    assert len(sizes) == 1, "every round of a fixed schedule has the same number of calls"
    per_round = sizes.pop()
    assert 1 <= per_round <= 5  # ~10 ms of 2 ms calls (fewer if the machine is slow)
    # One probe call, the back-to-back window (~5 ms of 2 ms calls; none when a pre-empted
    # probe already took the whole window), then the timed calls.
    assert 3 * per_round + 1 <= fn.calls <= 3 * per_round + 1 + 3


@pytest.mark.parametrize("rounds", [1, 2, 7])
def test_round_count_is_honoured(rounds: int) -> None:
    m = time_cpu(Counter(), TimingSpec(warmup_ms=0, rep_ms=0.5, rounds=rounds))
    assert len(m.rounds) == rounds
    assert all(len(r) >= 1 for r in m.rounds)


def test_median_is_close_to_a_known_sleep() -> None:
    m = time_cpu(Counter(0.002), TimingSpec(warmup_ms=2, rep_ms=20, rounds=3))
    stats = TimingStats(m.rounds)
    # time.sleep never returns early; a loaded machine may make it much later.
    assert 1.9 <= stats.median <= 25.0, stats.median
    assert stats.min >= 1.9
    lo, hi = stats.ci95
    assert lo <= stats.median <= hi
    assert m.host_ms is not None and m.host_ms >= 1.9
    assert m.stream_ms is not None and m.stream_ms >= 1.9


def test_warmup_is_spent_before_recording() -> None:
    fn = Counter(0.001)
    start = time.perf_counter()
    m = time_cpu(fn, TimingSpec(warmup_ms=30, rep_ms=1, rounds=1))
    elapsed_ms = (time.perf_counter() - start) * 1e3
    recorded = sum(len(r) for r in m.rounds)
    assert elapsed_ms >= 30
    assert fn.calls > recorded + 2, "warm-up calls happen and are not recorded"


def test_a_slow_call_is_not_repeated_to_measure_host_time() -> None:
    """Interpreted Triton: a call slower than the back-to-back window runs probe + rounds only."""
    fn = Counter(0.008)
    m = time_cpu(fn, TimingSpec(warmup_ms=0, rep_ms=0, rounds=2))
    assert fn.calls == 1 + 2
    assert m.host_ms == m.stream_ms and m.host_ms >= 8.0


def test_adaptive_cpu_timing_stops_within_its_budget() -> None:
    start = time.perf_counter()
    m = time_cpu(Counter(), TimingSpec(warmup_ms=0, rep_ms=2, min_ms=10, max_ms=60))
    elapsed_ms = (time.perf_counter() - start) * 1e3
    assert m.stop_reason in (STOP_TARGET, STOP_MAX_TIME)
    assert len(m.rounds) >= 2
    assert elapsed_ms < 60 + 500  # the budget, plus one round and the set-up on a slow machine


def test_time_callable_on_cpu_uses_the_cpu_timer() -> None:
    m = time_callable(Counter(), TimingSpec(warmup_ms=0, rep_ms=0.2, rounds=2), "cpu")
    assert m.timer == "perf_counter" and len(m.rounds) == 2


def test_calls_per_round_is_bounded() -> None:
    assert calls_per_round(2.0, 10.0) == 5
    assert calls_per_round(50.0, 10.0) == 1, "a call longer than a round still runs once"
    assert calls_per_round(1e-9, 1000.0) == MAX_CALLS_PER_ROUND
    assert calls_per_round(0.0, 10.0) == MAX_CALLS_PER_ROUND


def test_quick_and_with_rounds() -> None:
    spec = TimingSpec(warmup_ms=25, rep_ms=100, rounds=5, flush_l2=False, cuda_graph=True)
    quick = spec.quick()
    assert quick.warmup_ms <= 2 and quick.rep_ms <= 5 and quick.rounds <= 2
    assert (quick.flush_l2, quick.cuda_graph) == (False, True)
    assert spec.with_rounds(9) == TimingSpec(25, 100, 9, False, True)
    adaptive = TimingSpec()
    assert adaptive.adaptive and not adaptive.with_rounds(3).adaptive
    assert adaptive.quick().rounds == 2, "--quick is a short fixed schedule"
