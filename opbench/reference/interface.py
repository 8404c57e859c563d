"""What every reference reader offers, and the options the CLI passes to it.

A reader turns one file format into a `ReferenceProfile` (opbench/reference/model.py).
It offers two things:

- `sniff(head) -> float`: how sure it is, from the first few KiB of the file's text, that the
  file is in its format (0.0 = not mine, 1.0 = certainly mine). `registry.detect` asks every
  reader and takes the most confident one.
- `read(path, options) -> ReferenceProfile`: parse the whole file. Bad input raises
  `opbench.errors.InputError` naming file, line and column where the format allows.

Readers are pure Python: they import neither torch nor triton.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from opbench.errors import InputError
from opbench.reference.model import ReferenceProfile

# Seconds per unit, for every unit a reader accepts in options or in a file.
UNIT_SECONDS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}

# Milliseconds per unit: multiply a value in `unit` by this to get milliseconds.
UNIT_TO_MS: dict[str, float] = {unit: seconds * 1e3 for unit, seconds in UNIT_SECONDS.items()}

# JSON readers load the file's text into memory; refuse anything larger than this.
MAX_JSON_BYTES = 512 * 1024 * 1024

# No real model has this many distinct layers; a file with more is not a per-layer profile,
# and stopping early keeps a huge wrong file from filling memory.
MAX_LAYERS = 100_000


class Flag:
    """Values a reader may put in `ReferenceTiming.flags` (a layer's time deserves caution)."""

    NEGATIVE = "negative_difference"  # a prefix difference below zero
    BELOW_NOISE = "below_noise"  # a prefix difference within its own uncertainty
    NESTED = "nested_range"  # a profiler range inside another range: times overlap
    MISSING_IN_SOME_RUNS = "missing_in_some_runs"  # not present in every kept run
    ACTIVATION_AUTO = "activation_auto"  # SAS act=AUTO, members guessed from the layer type
    ASYNC_HOST_TIME = "async_host_time"  # host time of an asynchronous GPU launch
    RENAMED_BY_ENGINE = "renamed_by_engine"  # the engine named this node after a fused tensor
    # ONNX Runtime's NCHWc kernels: channels padded to a whole block (24 → 32 on AVX-512)
    BLOCKED_LAYOUT = "blocked_layout"
    SPIKES = "spikes"  # its slowest run took over SPIKE_RATIO times its median
    # several events of one node in one run, summed: a Loop body, or nodes of one name
    REPEATED_IN_RUN = "repeated_in_run"


# A run slower than this many medians is a spike (pre-emption, a page fault, a cold cache):
# the median stands, and the row's reason says the reference was not steady.
SPIKE_RATIO = 5.0


@dataclass(frozen=True)
class ReaderOptions:
    """Options a user may give on the command line.

    time_column: which column (CSV) or statistic (JSON) holds the time; None = detect.
        Header matching ignores case and surrounding spaces.
    unit: the unit of the time values ("s", "ms", "us", "ns") where the file does not say;
        None = take it from the header. Formats with a fixed unit accept only that unit.
    skip_runs: leading runs dropped as warm-up, where a file holds several runs of the whole
        model (onnxruntime `model_run` windows; CSVs with a run column).
    """

    time_column: str | None = None
    unit: str | None = None
    skip_runs: int = 1

    def __post_init__(self) -> None:
        if self.unit is not None:
            unit = normalize_unit(self.unit)
            if unit is None:
                raise InputError(
                    f"unknown time unit {self.unit!r}: use one of {', '.join(UNIT_SECONDS)}"
                )
            object.__setattr__(self, "unit", unit)
        if self.time_column is not None and not self.time_column.strip():
            raise InputError("time column name is empty")
        if isinstance(self.skip_runs, bool) or not isinstance(self.skip_runs, int):
            raise InputError(f"skip_runs must be a whole number, not {self.skip_runs!r}")
        if self.skip_runs < 0:
            raise InputError(f"skip_runs must be 0 or more, not {self.skip_runs}")


_UNIT_ALIASES: dict[str, str] = {
    "s": "s",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "ms": "ms",
    "msec": "ms",
    "msecs": "ms",
    "millisecond": "ms",
    "milliseconds": "ms",
    "us": "us",
    "µs": "us",  # micro sign U+00B5
    "μs": "us",  # Greek mu U+03BC
    "usec": "us",
    "usecs": "us",
    "microsecond": "us",
    "microseconds": "us",
    "ns": "ns",
    "nsec": "ns",
    "nsecs": "ns",
    "nanosecond": "ns",
    "nanoseconds": "ns",
}


def normalize_unit(text: str) -> str | None:
    """'msec', 'µs', 'Seconds' -> 'ms', 'us', 's'; None when it is no time unit."""
    return _UNIT_ALIASES.get(text.strip().lower())


class Reader(Protocol):
    """One reference format. Implementations are plain classes with one module-level instance."""

    name: str  # the format name used by `--format` and stored in ReferenceProfile.format
    engine: str  # the engine that wrote the file, stored in ReferenceTiming.engine
    description: str  # one line for `--help` and error messages

    def sniff(self, head: str) -> float:
        """Confidence in [0, 1] that a file starting with `head` is in this format."""
        ...

    def read(self, path: Path, options: ReaderOptions) -> ReferenceProfile:
        """Parse the file; raise InputError on bad input."""
        ...
