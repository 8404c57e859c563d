"""Rounds sized by wall time and the adaptive stopping rule, on a fake clock."""

from __future__ import annotations

import random

from opbench.measure.stopping import (
    MIN_ADAPTIVE_ROUNDS,
    STOP_MAX_TIME,
    STOP_ROUNDS,
    STOP_TARGET,
    interval_is_tight,
    preemption_warning,
    take_samples,
)
from opbench.spec.model import TimingSpec


class FakeDevice:
    """A call takes `sample_ms` of wall time (flush and launch included) and reports `draw()`."""

    def __init__(self, sample_ms: float, draw) -> None:
        self.now_s = 0.0
        self.sample_ms = sample_ms
        self.draw = draw
        self.round_sizes: list[int] = []

    def clock(self) -> float:
        return self.now_s

    def take_round(self, calls: int) -> list[float]:
        self.round_sizes.append(calls)
        self.now_s += calls * self.sample_ms / 1e3
        return [self.draw() for _ in range(calls)]


def test_fixed_schedule_takes_exactly_its_rounds_of_equal_size() -> None:
    dev = FakeDevice(0.1, lambda: 0.005)
    sampled = take_samples(dev.take_round, 0.1, TimingSpec(rep_ms=100, rounds=5), dev.clock)
    assert sampled.stop_reason == STOP_ROUNDS
    assert dev.round_sizes == [1000] * 5, "100 ms rounds of 0.1 ms samples (wall, not kernel)"
    assert [len(r) for r in sampled.rounds] == dev.round_sizes


def test_rounds_are_sized_by_wall_time_not_kernel_time() -> None:
    """A 5 us kernel behind a 70 us flush: a round of 20 ms holds ~266 calls, not 4000."""
    dev = FakeDevice(0.075, lambda: 0.005)
    take_samples(dev.take_round, 0.075, TimingSpec(rep_ms=20, rounds=2), dev.clock)
    assert dev.round_sizes == [266, 266]


def test_adaptive_resizes_after_the_first_round_from_its_real_wall_time() -> None:
    dev = FakeDevice(0.2, lambda: 0.01)  # the warm-up guessed 0.1 ms; a sample really takes 0.2
    take_samples(dev.take_round, 0.1, TimingSpec(rep_ms=20), dev.clock)
    assert dev.round_sizes[0] == 200 and set(dev.round_sizes[1:]) == {100}


def test_quiet_samples_stop_on_the_target_after_the_minimum_budget() -> None:
    rng = random.Random(1)
    dev = FakeDevice(0.1, lambda: 1.0 + rng.gauss(0, 0.002))
    timing = TimingSpec(rep_ms=20, min_ms=100, max_ms=1000, target_ci=0.01)
    sampled = take_samples(dev.take_round, 0.1, timing, dev.clock)
    assert sampled.stop_reason == STOP_TARGET
    assert len(sampled.rounds) == MIN_ADAPTIVE_ROUNDS
    assert dev.now_s * 1e3 >= 100


def test_noisy_samples_run_to_the_maximum_budget() -> None:
    rng = random.Random(2)
    dev = FakeDevice(0.1, lambda: rng.choice((1.0, 1.5)))  # a bimodal mess: median unsettled
    timing = TimingSpec(rep_ms=20, min_ms=50, max_ms=300, target_ci=0.001)
    sampled = take_samples(dev.take_round, 0.1, timing, dev.clock)
    assert sampled.stop_reason == STOP_MAX_TIME
    assert 300 <= dev.now_s * 1e3 <= 320
    assert sum(len(r) for r in sampled.rounds) == sum(dev.round_sizes), "every sample kept"


def test_a_drift_between_rounds_keeps_sampling_even_when_each_round_is_tight() -> None:
    level = iter(1.0 + 0.02 * (i % 2) for i in range(10_000))
    rounds_seen: list[float] = []

    def take_round(calls: int) -> list[float]:
        value = next(level)
        rounds_seen.append(value)
        return [value] * calls

    clock = iter(i * 0.02 for i in range(100_000))
    sampled = take_samples(
        take_round, 0.1, TimingSpec(rep_ms=20, min_ms=0, max_ms=200), lambda: next(clock)
    )
    assert sampled.stop_reason == STOP_MAX_TIME


def test_interval_needs_agreement_between_rounds() -> None:
    tight = [[1.0, 1.001, 0.999] * 20 for _ in range(5)]
    assert interval_is_tight(tight, 0.01)
    drifting = [[m] * 60 for m in (1.0, 1.05, 1.0, 1.05, 1.0)]
    assert not interval_is_tight(drifting, 0.01)
    assert not interval_is_tight([[1.0] * 100], 0.01), "one round says nothing between rounds"


def test_preemption_warning() -> None:
    assert preemption_warning([[0.017] * 50, [0.0171] * 50, [0.0169] * 50]) is None
    stalled = preemption_warning([[7.99, 8.0], [5.99, 6.0], [0.02, 0.02]])
    assert stalled is not None and "round medians" in stalled
    spread = preemption_warning([[0.01, 0.01, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06] * 3])
    assert spread is not None and "spread" in spread
