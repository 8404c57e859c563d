"""Which environment keys make two runs' timings comparable, and how they are compared: the one
list that the regression gate (compare/baseline.py) and the merge of partial runs
(results/merge.py) both check, and the keys on how a run measured that the gate adds.
Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# opbench_vars ({OPBENCH_* name: value}) and plugins (list) change what runs as much as a
# new Triton does; kernel_version is a hash of opbench/kernels/.
ENV_KEYS: tuple[str, ...] = (
    "gpu_name",
    "driver",
    "torch",
    "triton",
    "kernel_version",
    "opbench_vars",
    "plugins",
)
# How the run measured, beside what it ran on: CPU threads change every CPU time and every
# host time. The regression gate compares these too (GATE_KEYS); how each layer was timed (its
# timer, fixed rounds or the stopping rule) is recorded per result and compared per layer
# (opbench/compare/gate_env.py).
TIMING_ENV_KEYS: tuple[str, ...] = ("threads",)
GATE_KEYS: tuple[str, ...] = ENV_KEYS + TIMING_ENV_KEYS
# Keys whose "nothing" is recorded as an empty value: not recorded and empty are the same
# (no OPBENCH_* variable set, no plugin loaded), so runs from before they were recorded stay
# comparable with runs that set none.
EMPTY_WHEN_ABSENT: dict[str, object] = {"opbench_vars": {}, "plugins": []}
NOT_RECORDED = "(not recorded)"


@dataclass(frozen=True)
class EnvDifference:
    """One fingerprint key whose value differs; NOT_RECORDED where a side lacks the key."""

    key: str
    baseline: Any
    current: Any

    def __str__(self) -> str:
        return f"{self.key}: {self.baseline} -> {self.current}"


def env_differences(
    current: Mapping[str, Any],
    baseline: Mapping[str, Any],
    keys: Iterable[str] = ENV_KEYS,
    ignore: Iterable[str] = (),
) -> list[EnvDifference]:
    """Compared keys whose values differ. A key absent on both sides is equal (nothing to
    compare); absent on one side only is a difference: comparability cannot be shown."""
    skipped = set(ignore)
    out = []
    for key in keys:
        if key in skipped:
            continue
        default = EMPTY_WHEN_ABSENT.get(key, NOT_RECORDED)
        has_old = key in baseline or key in EMPTY_WHEN_ABSENT
        has_new = key in current or key in EMPTY_WHEN_ABSENT
        if not has_old and not has_new:
            continue
        old, new = baseline.get(key, default), current.get(key, default)
        if not has_old or not has_new or old != new:
            out.append(EnvDifference(key, old, new))
    return out
