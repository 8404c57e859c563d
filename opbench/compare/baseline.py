"""The baseline a CI run is gated against: a small JSON file meant to be committed.

Per (model, layer, backend) it keeps what the gate needs (the round medians) plus the median,
CV and threshold for people reading diffs, and the environment fingerprint the timings belong
to. A previous run.json is accepted as a baseline too: `load_baseline` tells them apart.

    {
      "kind": "opbench-baseline", "schema_version": 1, "suite": "encoder",
      "created_at": "20261122T101500Z", "code_version": "3f2a...", "git_commit": "...",
      "complete": true,
      "env": {"gpu_name": "NVIDIA H200", "driver": "570.86", "torch": "2.11.0", ...},
      "entries": [{"model": "mlp[batch=8]", "layer": "fc1", "backend": "triton",
                   "round_medians_ms": [0.0412, ...], "median_ms": 0.0411, "cv": 0.004,
                   "threshold": null, "rounds": 5, "samples": 100, "timer": "cuda-events",
                   "interpreted": false, "covers": ["fc1"]}]
    }
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from opbench.errors import ExitCode, InputError, Location, OpbenchError
from opbench.measure.stopping import STOP_ROUNDS
from opbench.results.fingerprint import GATE_KEYS, env_differences
from opbench.results.io import RUN_FILE, run_from_dict, write_json_atomic
from opbench.results.jsonfile import read_json_object
from opbench.results.model import LayerResult, RunResult
from opbench.time_bounds import time_problem

BASELINE_KIND = "opbench-baseline"
BASELINE_SCHEMA_VERSION = 1

# Kept in the baseline for readers, never compared.
INFO_KEYS: tuple[str, ...] = (
    "cuda",
    "opbench",
    "git_commit",
    "python",
    "device",
    "gpu_count",
    "sm_count",
)


Key = tuple[str, str, str]


class BaselineError(OpbenchError):
    """No usable baseline (missing file, unsupported version): exit 4."""

    def __init__(self, message: str, location: Location | None = None) -> None:
        super().__init__(message, location or Location(), ExitCode.BASELINE)


@dataclass(frozen=True)
class BaselineEntry:
    """One (model, layer, backend) timing of the baseline.

    round_medians_ms: the median of each timing round, in round order: what the gate tests.
    median_ms: the median of all samples; cv: CV of the round medians (both for readers).
    threshold: the layer's regression_threshold when the baseline was taken, else None.
    timer / schedule: how it was timed ("cuda-events", "cuda-graph", "perf_counter"; "fixed
        rounds" or "stopping rule", "" where not recorded): the gate compares them.
    """

    model: str
    layer: str
    backend: str
    round_medians_ms: tuple[float, ...]
    median_ms: float
    cv: float
    threshold: float | None = None
    rounds: int = 0
    samples: int = 0
    timer: str = ""
    interpreted: bool = False
    covers: tuple[str, ...] = ()
    schedule: str = ""

    @property
    def key(self) -> Key:
        return (self.model, self.layer, self.backend)


@dataclass(frozen=True)
class Baseline:
    """What a run is compared with. source: "baseline" (a baseline file) or "run" (a run.json)."""

    suite: str
    env: Mapping[str, Any] = field(default_factory=dict)
    entries: tuple[BaselineEntry, ...] = ()
    created_at: str | None = None
    complete: bool = True
    source: str = "baseline"
    path: str | None = None
    schema_version: int = BASELINE_SCHEMA_VERSION

    def find(self, key: Key) -> BaselineEntry | None:
        return self._by_key.get(key)

    @cached_property
    def _by_key(self) -> dict[Key, BaselineEntry]:
        return {entry.key: entry for entry in self.entries}

    @property
    def code_version(self) -> str | None:
        return self.env.get("kernel_version")


def entry_from_layer(result: LayerResult) -> BaselineEntry | None:
    """A baseline entry for a correct, timed layer; None for anything else."""
    stats = result.stats
    if not result.correct or stats is None:
        return None
    return BaselineEntry(
        model=result.model,
        layer=result.layer,
        backend=result.backend,
        round_medians_ms=tuple(stats.round_medians),
        median_ms=stats.median,
        cv=stats.cv,
        threshold=result.regression_threshold,
        rounds=len(stats.round_medians),
        samples=stats.count,
        timer=result.timer,
        interpreted=result.interpreted,
        covers=tuple(result.covers),
        schedule=schedule_of(result),
    )


FIXED_ROUNDS = "fixed rounds"
STOPPING_RULE = "stopping rule"


def schedule_of(result: LayerResult) -> str:
    """How many samples a result took: a fixed number of rounds (`timing.rounds`, --rounds,
    --quick), or rounds until the stopping rule held; "" where the run did not record it."""
    if not result.stop_reason:
        return ""
    return FIXED_ROUNDS if result.stop_reason == STOP_ROUNDS else STOPPING_RULE


def baseline_from_run(run: RunResult, path: str | None = None) -> Baseline:
    """The baseline a run makes: its correct, timed layers (errors and failures are left out)."""
    entries = tuple(e for e in (entry_from_layer(r) for r in run.layers) if e is not None)
    env = {k: run.env[k] for k in GATE_KEYS + INFO_KEYS if k in run.env}
    return Baseline(
        suite=run.suite,
        env=env,
        entries=entries,
        created_at=run.finished_at or run.started_at,
        complete=run.complete,
        source="run",
        path=path,
    )


def updated_baseline(run: RunResult, previous: Baseline | None = None) -> Baseline:
    """The baseline `--update-baseline` writes.

    When `previous` has the same suite and fingerprint, its entries that this run did not
    measure (a run limited with --model/--layer, a shard) are kept; otherwise it is replaced.
    """
    new = replace(baseline_from_run(run), source="baseline")
    if (
        previous is None
        or previous.suite != run.suite
        or env_differences(run.env, previous.env, keys=GATE_KEYS)
    ):
        return new
    fresh = {e.key for e in new.entries} | {r.key for r in run.layers}
    kept = tuple(e for e in previous.entries if e.key not in fresh)
    return replace(new, entries=kept + new.entries, complete=new.complete and previous.complete)


def baseline_to_dict(baseline: Baseline) -> dict[str, Any]:
    return {
        "kind": BASELINE_KIND,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "suite": baseline.suite,
        "created_at": baseline.created_at,
        "code_version": baseline.code_version,
        "git_commit": baseline.env.get("git_commit"),
        "complete": baseline.complete,
        "env": dict(baseline.env),
        "entries": [
            {
                "model": e.model,
                "layer": e.layer,
                "backend": e.backend,
                "round_medians_ms": list(e.round_medians_ms),
                "median_ms": e.median_ms,
                "cv": e.cv,
                "threshold": e.threshold,
                "rounds": e.rounds,
                "samples": e.samples,
                "timer": e.timer,
                "interpreted": e.interpreted,
                "covers": list(e.covers),
                "schedule": e.schedule,
            }
            for e in sorted(baseline.entries, key=lambda e: e.key)
        ],
    }


def baseline_from_dict(data: Mapping[str, Any], path: str | None = None) -> Baseline:
    version = data.get("schema_version")
    if version != BASELINE_SCHEMA_VERSION:
        raise BaselineError(
            f"baseline schema_version {version!r} is not supported (this opbench reads "
            f"{BASELINE_SCHEMA_VERSION}); write a new one with --update-baseline",
            Location(file=path),
        )
    entries = []
    for raw in data.get("entries") or ():
        threshold = raw.get("threshold")
        medians = tuple(float(t) for t in raw["round_medians_ms"])
        median = float(raw["median_ms"])
        for t in (*medians, median):  # 0, NaN or 1e308 would be judged as a time
            if problem := time_problem(t):
                who = f"{raw['model']}/{raw['layer']}/{raw['backend']}"
                raise ValueError(f"entry {who}: a round median of {t!r}, {problem}")
        entries.append(
            BaselineEntry(
                model=str(raw["model"]),
                layer=str(raw["layer"]),
                backend=str(raw["backend"]),
                round_medians_ms=medians,
                median_ms=median,
                cv=float(raw.get("cv", 0.0)),
                threshold=None if threshold is None else float(threshold),
                rounds=int(raw.get("rounds", len(raw["round_medians_ms"]))),
                samples=int(raw.get("samples", 0)),
                timer=str(raw.get("timer", "")),
                interpreted=bool(raw.get("interpreted", False)),
                covers=tuple(raw.get("covers") or ()),
                schedule=str(raw.get("schedule", "")),
            )
        )
    return Baseline(
        suite=str(data["suite"]),
        env=dict(data.get("env") or {}),
        entries=tuple(entries),
        created_at=data.get("created_at"),
        complete=bool(data.get("complete", True)),
        source="baseline",
        path=path,
    )


def write_baseline(path: Path | str, baseline: Baseline | RunResult) -> Baseline:
    """Write a baseline file atomically (a RunResult is converted first); return what was written."""
    if isinstance(baseline, RunResult):
        baseline = baseline_from_run(baseline)
    baseline = replace(baseline, source="baseline", path=str(path))
    write_json_atomic(Path(path), baseline_to_dict(baseline))
    return baseline


def update_baseline_file(path: Path | str, run: RunResult) -> Baseline:
    """`--update-baseline` in one call: merge with the file there when compatible, then write."""
    previous = None
    if Path(path).is_file():
        try:
            previous = load_baseline(path)
        except OpbenchError:
            previous = None  # an unreadable or stale baseline is replaced, not merged
    return write_baseline(path, updated_baseline(run, previous))


def load_baseline(path: Path | str) -> Baseline:
    """Read a baseline file, or a run.json (or run folder) used as a baseline.

    Missing file or unsupported baseline version: BaselineError (exit 4).
    Not JSON, or neither a baseline nor a run: InputError (exit 2).
    """
    path = Path(path)
    if path.is_dir():
        path = path / RUN_FILE
    where = Location(file=str(path))
    data = read_json_object(
        path,
        "baseline",
        missing="no baseline file here; create it with "
        "`opbench compare RUN --baseline PATH --update-baseline`",
        unreadable=BaselineError,
    )
    try:
        if data.get("kind") == BASELINE_KIND:
            return baseline_from_dict(data, str(path))
        if "layers" in data and "suite" in data:
            return baseline_from_run(run_from_dict(data), str(path))
    except OpbenchError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InputError(f"not a usable baseline: {exc}", where) from None
    raise InputError("neither an opbench baseline nor a run.json", where)
