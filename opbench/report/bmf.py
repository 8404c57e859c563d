"""Bencher Metric Format (BMF) export, for tracking timings over time with Bencher.

BMF is JSON: {benchmark_name: {measure_slug: {"value": v, "lower_value": lo, "upper_value": hi}}}
(https://bencher.dev/docs/reference/bencher-metric-format). One benchmark per
(suite, model, layer, backend) and per model's end-to-end forward and mode, named
"suite/model/layer/backend" ("…/end-to-end/…" eager, "…/end-to-end-cuda_graph/…");
value = median of all samples, lower/upper = the distribution-free 95% interval of that
median (TimingStats.ci95). Interpreter times are no performance figures: left out.

Bencher's built-in "latency" measure is in nanoseconds, so milliseconds go under a measure of
their own, "latency-ms" (Bencher creates a measure on first use); unit="ns" writes the
built-in "latency" instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from opbench.results.io import write_json_atomic
from opbench.results.model import RunResult
from opbench.results.stats import TimingStats

MEASURE_MS = "latency-ms"
MEASURE_NS = "latency"


def _metric(stats: TimingStats, scale: float) -> dict[str, float]:
    low, high = stats.ci95
    return {
        "value": stats.median * scale,
        "lower_value": min(low, stats.median) * scale,
        "upper_value": max(high, stats.median) * scale,
    }


def bmf_from_run(run: RunResult, unit: Literal["ms", "ns"] = "ms") -> dict[str, dict[str, Any]]:
    """BMF for every correct, timed layer and every timed end-to-end forward of `run`."""
    if unit not in ("ms", "ns"):
        raise ValueError(f"unit must be 'ms' or 'ns', not {unit!r}")
    measure, scale = (MEASURE_MS, 1.0) if unit == "ms" else (MEASURE_NS, 1e6)
    out: dict[str, dict[str, Any]] = {}
    for result in run.layers:
        stats = result.stats
        if result.correct and stats is not None and not result.interpreted:
            name = f"{run.suite}/{result.model}/{result.layer}/{result.backend}"
            out[name] = {measure: _metric(stats, scale)}
    for e2e in run.end_to_end:
        stats = e2e.stats
        if e2e.ran and stats is not None and not e2e.interpreted:
            # the eager forward keeps the name it always had; other modes are named apart
            what = "end-to-end" if e2e.mode == "eager" else f"end-to-end-{e2e.mode}"
            out[f"{run.suite}/{e2e.model}/{what}/{e2e.backend}"] = {measure: _metric(stats, scale)}
    return out


def write_bmf(path: Path | str, run: RunResult, unit: Literal["ms", "ns"] = "ms") -> dict[str, Any]:
    """Write the BMF file atomically and return what was written."""
    data = bmf_from_run(run, unit)
    write_json_atomic(Path(path), data)
    return data
