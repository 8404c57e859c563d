"""Were the run and its baseline measured the same way? The differences the regression gate
refuses (exit 4) unless --allow-env-change, and names in its report either way:

- the environment fingerprint, and how the run measured: CPU threads
  (results/fingerprint.py GATE_KEYS);
- per layer timed on both sides: the timer (CUDA events around launches, CUDA graph
  replays, a host clock) and the schedule (a fixed number of rounds, or rounds until the
  stopping rule held). A layer timed as a graph replay is not the layer timed launch by
  launch, and a ratio of the two is no regression.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from opbench.compare.baseline import Baseline, BaselineEntry, schedule_of
from opbench.results.fingerprint import (
    GATE_KEYS,
    NOT_RECORDED,
    EnvDifference,
    env_differences,
)
from opbench.results.model import LayerResult, RunResult


def gate_differences(
    current: RunResult,
    baseline: Baseline,
    wanted: Callable[[str], bool] = lambda backend: True,
    ignore: Iterable[str] = (),
) -> list[EnvDifference]:
    """Every way the run was measured differently from its baseline (empty: comparable)."""
    diffs = env_differences(current.env, baseline.env, keys=GATE_KEYS, ignore=ignore)
    if baseline.suite != current.suite:
        diffs.insert(0, EnvDifference("suite", baseline.suite, current.suite))
    skipped = set(ignore)
    pairs: dict[str, Counter[tuple[str, str]]] = {"timer": Counter(), "schedule": Counter()}
    seen: set[tuple[str, str, str]] = set()
    for result in current.layers:
        entry = baseline.find(result.key)
        if entry is None or result.key in seen or not _timed(result) or not wanted(result.backend):
            continue
        seen.add(result.key)
        for key, old, new in _how(entry, result):
            if key not in skipped and old != new:
                pairs[key][(old or NOT_RECORDED, new or NOT_RECORDED)] += 1
    for key, counted in pairs.items():
        for (old, new), layers in sorted(counted.items()):
            diffs.append(EnvDifference(f"{key} ({layers} layer(s))", old, new))
    return diffs


def _timed(result: LayerResult) -> bool:
    return result.ran and result.stats is not None


def _how(entry: BaselineEntry, result: LayerResult) -> list[tuple[str, str, str]]:
    return [
        ("timer", entry.timer, result.timer),
        ("schedule", entry.schedule, schedule_of(result)),
    ]
