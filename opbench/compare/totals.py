"""What the reference spent: on the whole profile, and on one model of the run.

A profile holding one model alone gives that model its own total (ONNX Runtime's
`model_run`, TensorRT's sum, …) where the file has one, else the sum of all its rows; with
several models each gets the sum of the rows it owns (linked to it, or named after it).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from opbench.compare.model import Interval
from opbench.compare.verdict import reference_interval, sum_intervals
from opbench.match.links import ModelMatch
from opbench.match.names import members_of, path_of, qualifier_of
from opbench.match.suite_layers import SuiteModel
from opbench.reference.model import ReferenceProfile, ReferenceTiming, RefStatus

OWN_TOTAL = "the reference's own total"
EVERY_ROW = "sum of every reference row"
MODEL_ROWS = "sum of the reference rows of this model"


def _time(row: ReferenceTiming) -> float:
    t = row.time_ms
    return t if t is not None and math.isfinite(t) else 0.0


def _counted(row: ReferenceTiming) -> bool:
    return row.status in (RefStatus.TIMED, RefStatus.OVERHEAD)


def owner_of(row: ReferenceTiming, models: Sequence[SuiteModel]) -> str | None:
    """The model a row's name is qualified with, if any."""
    for member in members_of(row):
        owner = qualifier_of(path_of(member), models)
        if owner is not None:
            return owner.name
    return None


def whole_reference_total(profile: ReferenceProfile) -> tuple[float, str]:
    if profile.total_ms is not None:
        return profile.total_ms, OWN_TOTAL
    return sum(_time(r) for r in profile.layers if _counted(r)), EVERY_ROW


def model_reference_total(
    profile: ReferenceProfile,
    model: SuiteModel,
    models: Sequence[SuiteModel],
    match: ModelMatch,
    alone: bool,
) -> tuple[float | None, str, Interval | None, float]:
    """(total, how it was found, its interval where it is a sum of rows, overhead ms).

    alone: the profile holds this model only (one model compared, no foreign rows)."""
    rows = profile.layers
    if alone:
        overhead = sum(_time(r) for r in rows if r.status == RefStatus.OVERHEAD)
        if profile.total_ms is not None:
            return profile.total_ms, OWN_TOTAL, None, overhead
        owned = [r for r in rows if _counted(r)]
        spread = sum_intervals(i for i in map(reference_interval, owned) if i is not None)
        return sum(_time(r) for r in owned), EVERY_ROW, spread, overhead
    positions = {p for p, r in enumerate(rows) if owner_of(r, models) == model.name}
    owned = [rows[p] for p in sorted(positions | match.rows)]
    overhead = sum(_time(r) for r in owned if r.status == RefStatus.OVERHEAD)
    spread = sum_intervals(i for i in map(reference_interval, owned) if i is not None)
    return sum(_time(r) for r in owned), MODEL_ROWS, spread, overhead
