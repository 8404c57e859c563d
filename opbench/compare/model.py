"""What `opbench compare` produces: frozen dataclasses, written to comparison.json and read back
by `opbench report`. Times are milliseconds; speedup = reference time / opbench time.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opbench.spec.model import DEFAULT_TARGET_SPEEDUP

COMPARISON_SCHEMA_VERSION = 1

DEFAULT_TARGET = DEFAULT_TARGET_SPEEDUP


class Verdict:
    PASS = "PASS"  # lower 95% bound of the speedup >= target
    FAIL = "FAIL"  # upper bound < target, or the layer's output was incorrect
    UNCERTAIN = "UNCERTAIN"  # the interval straddles the target
    ERROR = "ERROR"  # the layer did not run (unsupported, error, no samples)

    ALL = ("PASS", "FAIL", "UNCERTAIN", "ERROR")


@dataclass(frozen=True)
class Interval:
    """A value with a conservative 95% interval (lo <= value <= hi)."""

    value: float
    lo: float
    hi: float

    def __add__(self, other: Interval) -> Interval:
        # Summing the bounds assumes the errors are perfectly correlated: the widest honest sum.
        return Interval(self.value + other.value, self.lo + other.lo, self.hi + other.hi)


@dataclass(frozen=True)
class BackendTiming:
    """One backend's time for a comparison row, and its verdict against the reference.

    results: how many opbench results were summed (fused results count once).
    speedup: reference / opbench, with lo = ref.lo / ob.hi and hi = ref.hi / ob.lo.
    reason: why the verdict is FAIL or ERROR, or a caution (e.g. interpreted timings).
    tflops / gbps: achieved rates summed over the row's results (for the roofline).
    """

    backend: str
    verdict: str
    time: Interval | None = None
    speedup: Interval | None = None
    reason: str | None = None
    results: int = 0
    correct: bool | None = None
    rel_l2: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    interpreted: bool = False


@dataclass(frozen=True)
class ComparisonRow:
    """One group of suite layers against the reference rows that account for them.

    layers: suite layers of the group, in execution order (more than one when a reference
        row covers several layers, or a backend fused them).
    reference_names: the reference rows' raw names; reference_rows their positions in the
        profile.
    sources: how the rows were matched (reference_name, map, name, signature).
    reference: summed reference time with its spread (min/max or noise where the file had it).
    target: the speedup the primary backend must reach.
    timings: one entry per backend in the run, the primary backend first.
    """

    model: str
    layers: tuple[str, ...]
    ops: tuple[str, ...]
    reference_names: tuple[str, ...]
    reference_rows: tuple[int, ...]
    sources: tuple[str, ...]
    reference: Interval | None
    target: float
    timings: tuple[BackendTiming, ...]

    @property
    def label(self) -> str:
        return " + ".join(self.layers)

    @property
    def primary(self) -> BackendTiming:
        return self.timings[0]

    def timing(self, backend: str) -> BackendTiming | None:
        for timing in self.timings:
            if timing.backend == backend:
                return timing
        return None


@dataclass(frozen=True)
class ModelSummary:
    """Per model, for the primary backend.

    matched_reference_ms / matched_opbench_ms: sums over rows where both sides have a time.
    total_speedup: their ratio.
    geomean_speedup: geometric mean of the per-row speedups.
    at_target: rows with verdict PASS; compared: rows with a verdict other than ERROR.
    opbench_total_ms: every layer result of the model (matched or not; fused counted once).
    reference_total_ms: everything the reference spent on this model: its own total when the
        profile holds this model alone, else the sum of its rows (timed + overhead).
    overhead_ms: time of reference rows that are engine overhead (reformat, reshape, ...).
    counts: verdict -> number of rows.
    """

    model: str
    backend: str
    rows: int
    matched_reference_ms: float
    matched_opbench_ms: float
    total_speedup: float | None
    geomean_speedup: float | None
    at_target: int
    compared: int
    opbench_total_ms: float
    reference_total_ms: float | None
    reference_total_source: str
    overhead_ms: float
    counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def whole_speedup(self) -> float | None:
        if self.reference_total_ms is None or self.opbench_total_ms <= 0:
            return None
        return self.reference_total_ms / self.opbench_total_ms


@dataclass(frozen=True)
class Unmatched:
    """A layer on one side with no partner on the other. side: "reference" or "suite"."""

    side: str
    name: str
    model: str | None = None
    op: str | None = None
    time_ms: float | None = None
    row: int | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Overhead:
    """A reference row that is engine work, not a suite layer (status overhead/not_run/input)."""

    name: str
    status: str
    row: int
    time_ms: float | None = None
    raw_type: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class RooflinePoint:
    """One opbench result's achieved rates, for the roofline plot."""

    model: str
    layer: str
    op: str
    backend: str
    tflops: float | None
    gbps: float | None


@dataclass(frozen=True)
class Peaks:
    """The device ceilings the roofline is drawn under. measured: from the run's env."""

    tflops: float
    gbps: float
    label: str
    measured: bool


@dataclass(frozen=True)
class ReferenceInfo:
    source: str
    engine: str
    format: str
    detected: bool
    total_ms: float | None
    layers: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comparison:
    """Everything `opbench compare` found; enough to re-render every report without the run.

    backend: the primary (gated) backend; backends: every backend in the run, primary first.
    target: the --target override, or None when each row uses its suite target.
    opbench_total_ms: the primary backend's time summed over every layer of the compared
        models (fused results once), against reference_total_ms: the profile's own total, or
        the sum of all its rows (reference_total_source says which).
    """

    suite: str
    run: str
    device: str
    run_started_at: str
    created_at: str
    backend: str
    backends: tuple[str, ...]
    target: float | None
    reference: ReferenceInfo
    rows: tuple[ComparisonRow, ...]
    models: tuple[ModelSummary, ...]
    unmatched: tuple[Unmatched, ...] = ()
    overhead: tuple[Overhead, ...] = ()
    roofline: tuple[RooflinePoint, ...] = ()
    peaks: Peaks | None = None
    how_matched: str = ""
    opbench_total_ms: float = 0.0
    reference_total_ms: float | None = None
    reference_total_source: str = ""
    notes: tuple[str, ...] = ()
    env: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = COMPARISON_SCHEMA_VERSION

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(Verdict.ALL, 0)
        for row in self.rows:
            counts[row.primary.verdict] += 1
        return counts

    @property
    def whole_speedup(self) -> float | None:
        if self.reference_total_ms is None or self.opbench_total_ms <= 0:
            return None
        return self.reference_total_ms / self.opbench_total_ms

    @property
    def failed(self) -> bool:
        """Any row of the primary backend FAILs: the gate's exit code 1."""
        return any(row.primary.verdict == Verdict.FAIL for row in self.rows)
