"""What `opbench compare` produces: frozen dataclasses, written to comparison.json and read back
by `opbench report`. Times are milliseconds; speedup = reference time / opbench time.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opbench.compare.graphs import GraphLayer
from opbench.targets import DEFAULT_TARGET_SPEEDUP

COMPARISON_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class QuantPeer:
    """PyTorch's own quantized GEMM for one `quant` (a per-layer peer: it runs that quant's
    linears and nothing else), and the ComparisonRow field with the primary backend's speed-up
    over it. A new peer adds its field to ComparisonRow: the files keep one named field per
    peer (vs_torch_int8, vs_torch_fp8), which older readers simply ignore."""

    quant: str
    backend: str

    @property
    def field(self) -> str:
        return "vs_" + self.backend.replace("-", "_")

    @property
    def header(self) -> str:
        return f"× {self.backend}"


# In the order their columns appear, after "× torch".
QUANT_PEERS: tuple[QuantPeer, ...] = (
    QuantPeer("int8", "torch-int8"),
    QuantPeer("fp8", "torch-fp8"),
)


class Verdict:
    PASS = "PASS"  # lower 95% bound of the speedup >= target
    FAIL = "FAIL"  # upper bound < target, or the layer's output was incorrect
    UNCERTAIN = "UNCERTAIN"  # the interval straddles the target, or the match is ambiguous
    ERROR = "ERROR"  # the layer did not run (unsupported, error, no samples)
    NOT_MEASURED = "NOT-MEASURED"  # interpreter times, or CPU times against a GPU engine
    MISSING = "MISSING"  # a timed suite layer that no reference row covers

    ALL = ("PASS", "FAIL", "UNCERTAIN", "ERROR", "NOT-MEASURED", "MISSING")
    # Verdicts that judged a speed: the rest say why no speed could be judged.
    JUDGED = ("PASS", "FAIL", "UNCERTAIN")


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
    reason: why the verdict is not PASS (FAIL, UNCERTAIN, ERROR, NOT-MEASURED, MISSING).
    tflops / gbps: achieved rates summed over the row's results (for the roofline).
    interpreted: timed in Triton's CPU interpreter; device: where it was timed.
    launch_bound: back-to-back calls take clearly longer than the device time.
    host_ms / stream_ms: summed host issue time and back-to-back time, where recorded.
    loose_tolerance: a result's tolerance was set above its dtype's default.
    failures: the failed correctness checks' reasons, as the checker wrote them.
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
    device: str | None = None
    launch_bound: bool = False
    host_ms: float | None = None
    stream_ms: float | None = None
    loose_tolerance: bool = False
    failures: tuple[str, ...] = ()


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
    ambiguity: why the rows' cover of the layers is not certain (then never PASS), else None.
    dtype, quant, input_shape, output_shape, flops, bytes: of the row's layers (first layer's
        input, last layer's output; FLOPs and bytes summed), for the per-layer tables.
    vs_torch: the primary backend's speed-up over torch eager on the same layers, where both
        were timed.
    vs_torch_int8 / vs_torch_fp8: the same over the quant's peer (QUANT_PEERS: torch-int8 on
        `quant: int8` rows, torch-fp8 on `quant: fp8` rows), only where the peer has OK times
        covering every layer of the row. The peers run the quantized linears alone, so a fused
        group (norm + linear, linear + add) has no peer time for the same work and stays None:
        the linear's time alone would compare unlike with unlike.
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
    ambiguity: str | None = None
    dtype: str = ""
    quant: str = "none"
    input_shape: tuple[int, ...] = ()
    output_shape: tuple[int, ...] = ()
    flops: int = 0
    bytes: int = 0
    vs_torch: float | None = None
    vs_torch_int8: float | None = None
    vs_torch_fp8: float | None = None

    @property
    def label(self) -> str:
        return " + ".join(self.layers)

    def vs_peer(self, peer: QuantPeer) -> float | None:
        value: float | None = getattr(self, peer.field)
        return value

    @property
    def primary(self) -> BackendTiming:
        return self.timings[0]

    def timing(self, backend: str) -> BackendTiming | None:
        for timing in self.timings:
            if timing.backend == backend:
                return timing
        return None


@dataclass(frozen=True)
class EndToEndTiming:
    """One backend's whole-model forward in one mode ("eager" or "cuda_graph").

    vs_torch: torch eager's end-to-end time in the same mode over this one, where both exist
        and this forward's outputs are right.
    best_peer, vs_best_peer: the fastest correct PyTorch peer in the same mode (compare/rows.py
        `is_torch_peer`: torch backends, library modules) and its time over this one.
    failures: the whole-model check of this forward (its outputs against the whole graph's
        reference): why it failed, empty when it passed; None where it was not checked (an
        older run, or a forward that never ran).
    rel_l2: the check's relative L2 error (of the output furthest from its limit).
    """

    backend: str
    mode: str
    status: str
    time: Interval | None = None
    vs_torch: float | None = None
    interpreted: bool = False
    message: str | None = None
    failures: tuple[str, ...] | None = None
    rel_l2: float | None = None
    best_peer: str | None = None
    vs_best_peer: float | None = None

    @property
    def check(self) -> str:
        """The whole-model check in a few words, for the reports."""
        if self.failures is None:
            return "not checked"
        if self.failures:
            return "FAIL: " + "; ".join(self.failures)
        return "ok" if self.rel_l2 is None else f"ok (rel_l2 {self.rel_l2:.1e})"


@dataclass(frozen=True)
class ModelSummary:
    """Per model, for the primary backend.

    matched_reference_ms / matched_opbench_ms: sums over rows where both sides have a time.
    total_speedup: their ratio.
    geomean_speedup: geometric mean of the per-row speedups.
    at_target: rows with verdict PASS; compared: rows with a verdict that judged a speed.
    opbench_total_ms: every layer result of the model (matched or not; fused counted once).
    reference_total_ms: everything the reference spent on this model: its own total when the
        profile holds this model alone, else the sum of its rows (timed + overhead).
    overhead_ms: time of reference rows that are engine overhead (reformat, reshape, ...).
    counts: verdict -> number of rows.
    verdict / speedup / basis / reason: the model's own verdict, on the end-to-end eager time
        of the primary backend where the run has one, else on the sum of its layers; basis
        says which ("end-to-end (eager)" or "sum of layers").
    end_to_end_speedup: reference total / end-to-end eager time, beside whole_speedup
        (reference total / sum of layers); both None unless the model is complete.
    end_to_end: every backend's end-to-end times, in both modes.
    missing: timed layers that no reference row covers.
    complete: both sides measured the whole model (every layer timed, every layer covered,
        every timed reference row of the model matched); else its verdict is UNCERTAIN.
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
    verdict: str = Verdict.ERROR
    speedup: Interval | None = None
    basis: str = ""
    reason: str | None = None
    target: float = DEFAULT_TARGET_SPEEDUP
    end_to_end_speedup: float | None = None
    end_to_end: tuple[EndToEndTiming, ...] = ()
    missing: tuple[str, ...] = ()
    complete: bool = True

    @property
    def whole_speedup(self) -> float | None:
        """The reference's total over the sum of layers; None unless both sides measured the
        whole model (a partial run against a whole profile is no speed-up)."""
        if not self.complete or self.reference_total_ms is None or self.opbench_total_ms <= 0:
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
    """One opbench result's achieved rates, for the roofline plot.

    flops / bytes: the op's counts, whose ratio is the arithmetic intensity (FLOP per byte).
    measured: False for interpreter times (drawn greyed, never as a performance figure).
    """

    model: str
    layer: str
    op: str
    backend: str
    tflops: float | None
    gbps: float | None
    flops: int = 0
    bytes: int = 0
    measured: bool = True

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.flops and self.bytes else None


@dataclass(frozen=True)
class Peaks:
    """The device ceilings the roofline is drawn under. measured: from the run's env (else
    the device's nominal figures, labelled as such)."""

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
    device: str | None = None


@dataclass(frozen=True)
class Comparison:
    """Everything `opbench compare` found; enough to re-render every report without the run.

    backend: the primary (gated) backend; backends: every backend in the run, primary first.
    target: the --target override, or None when each row uses its suite target.
    opbench_total_ms: the primary backend's time summed over every layer of the compared
        models (fused results once), against reference_total_ms: the profile's own total, or
        the sum of all its rows (reference_total_source says which).
    partial: --partial (the suite times part of the profiled model).
    complete: the two totals cover the same work: every compared model is complete, and the
        profile holds no unmatched row and no other model's rows (else no whole speed-up).
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
    #: each compared model's layers and edges (compare/graphs.py), for the graph chart
    graphs: Mapping[str, tuple[GraphLayer, ...]] = field(default_factory=dict)
    allow_missing: bool = False
    allow_cpu_times: bool = False
    partial: bool = False
    complete: bool = True
    schema_version: int = COMPARISON_SCHEMA_VERSION

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(Verdict.ALL, 0)
        for row in self.rows:
            counts[row.primary.verdict] += 1
        return counts

    @property
    def whole_speedup(self) -> float | None:
        """Every compared layer against the reference's total; None unless every compared
        model is complete and the profile holds nothing else (no --partial, no unmatched or
        other models' rows): the two totals must cover the same work."""
        if not self.complete or self.reference_total_ms is None or self.opbench_total_ms <= 0:
            return None
        return self.reference_total_ms / self.opbench_total_ms

    @property
    def failed(self) -> bool:
        """Any row or model verdict of the primary backend FAILs (compare/outcome.py gives the
        exit code). NOT-MEASURED, MISSING and UNCERTAIN never do."""
        return any(row.primary.verdict == Verdict.FAIL for row in self.rows) or any(
            m.verdict == Verdict.FAIL for m in self.models
        )
