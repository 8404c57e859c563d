"""What a run produces: frozen dataclasses holding raw samples, never only summaries.

Pure Python. `opbench.results.io` is the only place that turns these into JSON and back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from opbench.results.stats import TimingStats
from opbench.targets import DEFAULT_TARGET_SPEEDUP

SCHEMA_VERSION = 1

# A result is launch-bound when back-to-back calls take this much longer than its device time.
LAUNCH_BOUND = 1.2


class Status:
    """How a result ended, as run.json stores it.

    ok: ran, and its output passed every correctness check (or was never checked: see
        `Outcome.UNCHECKED`); wrong: ran, and its output failed a check (its times are kept,
        never used); unsupported: the backend declined the layer; error: it crashed.
    A script reading `status` alone never takes a wrong result for a good one. Files written
    before "wrong" existed say "ok" with `correctness.passed: false`: the results read them
    as "wrong" (`_wrong_if_failed`, the one adapter).
    """

    OK = "ok"
    WRONG = "wrong"
    UNSUPPORTED = "unsupported"
    ERROR = "error"
    RAN = frozenset({OK, WRONG})


class Outcome:
    """LayerResult.outcome: a status, refined by the correctness check where the layer ran."""

    OK = "ok"
    WRONG = "wrong"
    UNCHECKED = "unchecked"


def _wrong_if_failed(result: LayerResult | EndToEnd) -> None:
    """A result that ran and failed its correctness check has status "wrong", however it was
    built: by the pipeline (status ok, then its check), or read from an older run.json."""
    if result.status == Status.OK and result.correctness is not None:
        if not result.correctness.passed:
            object.__setattr__(result, "status", Status.WRONG)


@dataclass(frozen=True)
class Correctness:
    """One backend's output against the high-precision reference, on the same inputs.

    rel_l2: ||out - ref|| / ||ref|| over all elements.
    max_abs: largest absolute difference.
    nonfinite: NaN/Inf count in the backend's output.
    tolerance: the rel_l2 limit the layer had to meet.
    reference: how the reference was computed ("float64-cpu" or "float32-cuda").
    max_abs_limit: the element-wise limit on max_abs (scaled to the reference's magnitude and
        the dtype), or None where no element-wise limit was applied.
    unwritten: output elements the backend never wrote (still holding the poison value).
    failures: one reason per failed check ("rel_l2 3.1e-02 > 5.0e-03", "second input: ...",
        "last timed call differs from the first: ..."); empty when every check passed.
    loose_tolerance: the layer's tolerance was set above its dtype's default: reports mark it.
    tolerance_of: for a fused group, the member layer whose tolerance applied (the loosest
        among those its output comes through: docs/suite-format.md); None for one layer.
    """

    rel_l2: float
    max_abs: float
    nonfinite: int
    tolerance: float
    reference: str = "float64-cpu"
    max_abs_limit: float | None = None
    unwritten: int = 0
    failures: tuple[str, ...] = ()
    loose_tolerance: bool = False
    tolerance_of: str | None = None

    @property
    def passed(self) -> bool:
        return not self.reasons

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the output is wrong, one reason per failed check; empty when it passed. The
        checker's own `failures` where it wrote them, else what the recorded figures show (a
        run.json from before `failures` existed, or a result built by hand)."""
        if self.failures:
            return self.failures
        return broken_limits(self)


def broken_limits(c: Correctness, numel: int | None = None) -> tuple[str, ...]:
    """One line per limit `c` breaks (unwritten elements, NaN/Inf, rel_l2, max_abs); the
    checker's wording, also used for results recorded without their reasons. Unwritten
    elements hold the NaN poison, so they are not counted again as NaN/Inf."""
    found = []
    if c.unwritten:
        of = f" of {numel}" if numel is not None else ""
        found.append(f"{c.unwritten}{of} elements never written")
    if c.nonfinite > c.unwritten:
        found.append(f"{c.nonfinite - c.unwritten} NaN/Inf")
    whose = f" ({c.tolerance_of}'s tolerance)" if c.tolerance_of else ""
    if not c.nonfinite and not (c.rel_l2 == c.rel_l2 and c.rel_l2 <= c.tolerance):
        found.append(f"rel_l2 {c.rel_l2:.1e} > {c.tolerance:.1e}{whose}")
    if c.max_abs_limit is not None and not c.max_abs <= c.max_abs_limit:
        found.append(f"max_abs {c.max_abs:.1e} > {c.max_abs_limit:.1e}{whose}")
    return tuple(found)


@dataclass(frozen=True)
class LayerResult:
    """One layer built by one backend: its samples, its error, its cost model.

    model: the model instance name, sweeps expanded (e.g. "mlp[batch=8]").
    layer: the suite layer name; for a fused result, the first layer it covers.
    covers: every suite layer this measurement stands for, in order (fusion), else (layer,).
    samples_ms: raw samples, grouped by timing round.
    timer: "cuda-events", "cuda-graph" or "perf_counter".
    interpreted: Triton ran in its CPU interpreter: times are not performance figures.
    flops / bytes: the op's FLOP count and minimum bytes moved (each input read once,
        each output written once), for TFLOP/s and GB/s.
    tuning_s: one-off autotuning time spent before timing, never counted in samples.
    gpu: which GPU ran it (name and index/rank), for runs spread over several.
    note: anything a reader needs, e.g. a layout the backend used internally.
    host_ms: median host (CPU) time to issue one call, no synchronisation inside the loop.
    stream_ms: median time per call of back-to-back calls with no flush between them: what
        the layer costs inside an eagerly launched model (device time or host time, whichever
        is longer).
    plan: the backend's tuned choice (kernel and configuration: tiles, warps, stages, split-K),
        so that another machine can time the same configuration (`opbench run --plans`).
    stop_reason: why sampling stopped ("target_ci", "max_time", "rounds", ...).
    phases_s: wall seconds this result spent building, tuning, checking and timing.
    """

    model: str
    layer: str
    op: str
    backend: str
    status: str
    dtype: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    flops: int = 0
    bytes: int = 0
    quant: str = "none"
    covers: tuple[str, ...] = ()
    samples_ms: tuple[tuple[float, ...], ...] = ()
    timer: str = ""
    interpreted: bool = False
    correctness: Correctness | None = None
    message: str | None = None
    reference_name: str | None = None
    target_speedup: float = DEFAULT_TARGET_SPEEDUP
    regression_threshold: float | None = None
    device: str = "cpu"
    gpu: str | None = None
    tuning_s: float | None = None
    note: str | None = None
    host_ms: float | None = None
    stream_ms: float | None = None
    plan: Mapping[str, Any] | None = None
    stop_reason: str | None = None
    phases_s: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        _wrong_if_failed(self)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.model, self.layer, self.backend)

    @property
    def ran(self) -> bool:
        """It ran to the end and was timed (status ok or wrong)."""
        return self.status in Status.RAN

    @property
    def members(self) -> tuple[str, ...]:
        return self.covers or (self.layer,)

    @property
    def stats(self) -> TimingStats | None:
        if not self.samples_ms or not any(self.samples_ms):
            return None
        return TimingStats(self.samples_ms)

    @property
    def median_ms(self) -> float | None:
        stats = self.stats
        return stats.median if stats else None

    @property
    def correct(self) -> bool:
        """Ran and met its tolerance. A layer that is not correct can never count as a pass."""
        return self.status == Status.OK and self.correctness is not None and self.correctness.passed

    @property
    def outcome(self) -> str:
        """One word for how the result ended, the same in the run table and the progress line:
        "ok", "wrong" (ran, and its output failed a correctness check), "unchecked" (ran, never
        checked), "unsupported" or "error"."""
        if self.status != Status.OK:
            return self.status
        if self.correctness is None:
            return Outcome.UNCHECKED
        return Outcome.OK if self.correctness.passed else Outcome.WRONG

    @property
    def tflops(self) -> float | None:
        med = self.median_ms
        return self.flops / med / 1e9 if med and self.flops else None

    @property
    def gbps(self) -> float | None:
        med = self.median_ms
        return self.bytes / med / 1e6 if med and self.bytes else None

    @property
    def launch_bound(self) -> bool:
        """Back-to-back calls take clearly longer than the device time: the host can't keep up."""
        med = self.median_ms
        return bool(med and self.stream_ms is not None and self.stream_ms > LAUNCH_BOUND * med)


@dataclass(frozen=True)
class EndToEnd:
    """The whole model's forward over its graph, on one backend.

    mode: "eager" (Python issues each layer in turn) or "cuda_graph" (the whole forward
        captured once, replays timed).
    correctness: every model output of one call of this forward against the high-precision
        reference of the whole graph (from the same seeded model inputs); None where the
        forward never ran. Its tolerance is the loosest of the model's layers: errors of
        every layer reach the outputs.
    outputs: the model's outputs (the layers nothing reads) the correctness covers.
    peak_bytes: device memory the forward needs beyond what was allocated before it was set
        up (weights excluded): what the set-up keeps (buffers, workspaces, prepared model
        inputs) plus the most one call allocates on top (torch.cuda.max_memory_allocated over
        a call after the set-up; the set-up's passing allocations, tuning's included, do not
        count); None where not measured (the CPU).
    live_bytes: from the shapes, the most bytes of layer outputs alive at once when each is
        freed after its last reader: the floor peak_bytes can be held against.
    planned_bytes: from the plan, on any device: the bytes of the buffers the forward planned
        by liveness (the output arena and the shared scratch, pipeline/arena.py); None where
        no group writes planned buffers (torch backends).
    separate_bytes: from the same plan, what those outputs took as one buffer each.
    gpu: the device that ran it, with its rank under torchrun (as LayerResult.gpu).
    """

    model: str
    backend: str
    status: str
    samples_ms: tuple[tuple[float, ...], ...] = ()
    timer: str = ""
    interpreted: bool = False
    message: str | None = None
    mode: str = "eager"
    correctness: Correctness | None = None
    outputs: tuple[str, ...] = ()
    peak_bytes: int | None = None
    live_bytes: int | None = None
    planned_bytes: int | None = None
    separate_bytes: int | None = None
    gpu: str | None = None

    def __post_init__(self) -> None:
        _wrong_if_failed(self)

    @property
    def ran(self) -> bool:
        """It ran to the end (status ok or wrong)."""
        return self.status in Status.RAN

    @property
    def stats(self) -> TimingStats | None:
        return TimingStats(self.samples_ms) if self.samples_ms and any(self.samples_ms) else None

    @property
    def correct(self) -> bool:
        """Ran, and its outputs met the tolerance: the only rows whose times may count."""
        return self.status == Status.OK and self.correctness is not None and self.correctness.passed


@dataclass(frozen=True)
class RunResult:
    """One `opbench run`.

    suite_spec: the suite as loaded (defaults applied, sweeps expanded), as plain data.
    env: the environment fingerprint (GPU, driver, CUDA, torch, triton, python, opbench,
        git commit, clocks at start and end).
    complete: False until every planned layer has a result; an interrupted run stays False.
    shard: (k, n) when this run is share k of n (1-based), else None.
    planned: number of (model, layer, backend) results this run set out to produce.
    origin: where the suite came from when it is not a suite file: for `opbench run
        model.onnx`, the import's record (which nodes each layer computes, which were absorbed
        as views or constants, which are unsupported).
    options: the run's own choices that shape what it measures (`--backend`, `--model`,
        `--layer`, `--quick`, `--rounds`, whole-model on or off), as `RunOptions.recorded()`
        writes them; the shares of one run agree on every one (`opbench merge` checks). Empty
        in run files written before it was kept.
    """

    suite: str
    started_at: str
    device: str
    env: Mapping[str, Any] = field(default_factory=dict)
    suite_spec: Mapping[str, Any] = field(default_factory=dict)
    suite_source: str | None = None
    layers: tuple[LayerResult, ...] = ()
    end_to_end: tuple[EndToEnd, ...] = ()
    finished_at: str | None = None
    complete: bool = False
    shard: tuple[int, int] | None = None
    planned: int = 0
    origin: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def with_layer(self, result: LayerResult) -> RunResult:
        return replace(self, layers=self.layers + (result,))

    def find(self, model: str, layer: str, backend: str) -> LayerResult | None:
        for result in self.layers:
            if result.model == model and backend == result.backend and layer in result.members:
                return result
        return None

    @property
    def backends(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for result in self.layers:
            seen.setdefault(result.backend, None)
        return tuple(seen)

    @property
    def models(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for result in self.layers:
            seen.setdefault(result.model, None)
        return tuple(seen)


def crashed_results(run: RunResult, backend: str | None = None) -> list[LayerResult]:
    """Results that errored or failed their correctness check (unsupported is neither)."""
    return [
        r
        for r in run.layers
        if (backend is None or r.backend == backend)
        and (r.status in (Status.ERROR, Status.WRONG) or (r.status == Status.OK and not r.correct))
    ]
