"""One canonical schema for per-layer timings exported by another engine.

Every reader turns its format into a `ReferenceProfile`. Times are milliseconds everywhere.
Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class RefStatus:
    TIMED = "timed"  # a layer doing real work, with a time
    OVERHEAD = "overhead"  # engine-inserted work (reformat, reorder, reshape): not a suite layer
    NOT_RUN = "not_run"  # optimized out or not executed: no time
    INPUT = "input"  # an input/placeholder row with no real work


class TimeKind:
    DEVICE = "device"  # measured on the accelerator (kernel time)
    HOST = "host"  # measured with a host clock around the layer
    DERIVED = "derived"  # computed, e.g. differences of cumulative prefix times


@dataclass(frozen=True)
class ReferenceTiming:
    """One layer of the reference engine.

    index: position in the engine's execution order (0-based).
    name: the raw layer name as the engine wrote it.
    raw_type: the engine's op/layer type, if the file gives one.
    members: names of the ops this engine layer covers when it fused several (else empty).
    count: number of samples behind the statistics (1 when the file has a single number).
    median_ms..total_ms: statistics over those samples; None when the file does not give them.
    output_shape: the output shape if the file gives one (for matching by signature).
    line: line in the source file where this layer was read, for messages.
    noise_ms: an estimate of the time's uncertainty where the format implies one
        (e.g. prefix differences), else None.
    derived_from: for a time derived from cumulative (cut) times, the rows it combines and
        their coefficients, (row name, ±1), in file order; empty where the time was measured.
    """

    engine: str
    source: str
    index: int
    name: str
    raw_type: str | None = None
    members: tuple[str, ...] = ()
    status: str = RefStatus.TIMED
    time_kind: str = TimeKind.DEVICE
    count: int = 1
    median_ms: float | None = None
    mean_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    total_ms: float | None = None
    output_shape: tuple[int, ...] | None = None
    line: int | None = None
    noise_ms: float | None = None
    flags: tuple[str, ...] = ()
    derived_from: tuple[tuple[str, int], ...] = ()

    @property
    def time_ms(self) -> float | None:
        """The representative time: the median where known, else the mean."""
        return self.median_ms if self.median_ms is not None else self.mean_ms


class Device:
    """Where the reference engine ran, where the file tells: compare refuses to judge CPU
    times against a GPU engine's (NOT-MEASURED) unless asked."""

    GPU = "gpu"
    CPU = "cpu"


@dataclass(frozen=True)
class ReferenceProfile:
    """Everything read from one reference file. device: Device.GPU/CPU, or None unknown."""

    engine: str
    source: str
    format: str
    layers: tuple[ReferenceTiming, ...]
    total_ms: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    device: str | None = None
