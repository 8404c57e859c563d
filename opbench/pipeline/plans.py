"""Plans that reproduce: the tuned choices of one run, reused by another (`opbench run --plans`).

A plan file is JSON: {"opbench_plans": 1, "plans": [{"model", "layer", "backend", "plan"}]},
one entry per result that recorded a plan (the Triton backend's kernels and configurations).
`--plans` also takes a run.json, whose results carry the same plans. Plans are looked up by
(model, layer, backend); a plan that no longer fits (another GPU, another shape) is tuned
again by the kernel, with a warning, and the new result's plan says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opbench.errors import InputError, Location
from opbench.results.io import write_json_atomic
from opbench.results.model import LayerResult

PLANS_FORMAT = 1
PlanKey = tuple[str, str, str]  # (model, layer, backend)


def plan_key(model: str, layer: str, backend: str) -> PlanKey:
    return (model, layer, backend)


def plans_of(results: Iterable[LayerResult]) -> dict[PlanKey, Mapping[str, Any]]:
    """The recorded plans of a run's results, by (model, layer, backend)."""
    return {plan_key(r.model, r.layer, r.backend): r.plan for r in results if r.plan}


def costs_of(results: Iterable[LayerResult]) -> dict[PlanKey, float]:
    """The wall seconds each result took (build, tuning, check and timing), by (model, layer,
    backend): what a later run balances its shares on."""
    return {
        plan_key(r.model, r.layer, r.backend): sum(r.phases_s.values())
        for r in results
        if r.phases_s
    }


def write_plans(results: Iterable[LayerResult], path: Path) -> int:
    """Write the plans of `results` to `path`; returns how many were written."""
    entries = [{"model": m, "layer": la, "backend": b, "plan": dict(plan)}
               for (m, la, b), plan in plans_of(results).items()]  # fmt: skip
    write_json_atomic(path, {"opbench_plans": PLANS_FORMAT, "plans": entries})
    return len(entries)


@dataclass(frozen=True)
class RecordedPlans:
    """What a `--plans` file hands a run: the tuned plans, and (from a run.json only) the wall
    seconds each result took, both by (model, layer, backend). Read once, from one parse."""

    plans: dict[PlanKey, Mapping[str, Any]] = field(default_factory=dict)
    costs: dict[PlanKey, float] = field(default_factory=dict)


def read_plans(path: Path) -> RecordedPlans:
    """The plans of a plan file or a run.json (or a run folder). Bad input raises InputError."""
    where = Location(file=str(path), field="--plans")
    if path.is_dir():
        path = path / "run.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read the plans: {exc.strerror or exc}", where) from None
    except ValueError as exc:
        raise InputError(f"the plans are not valid JSON: {exc}", where) from None
    except RecursionError:
        raise InputError("the plans are JSON nested too deep to read", where) from None
    if isinstance(data, dict) and "opbench_plans" in data:
        return RecordedPlans(plans=_plan_entries(data, where))
    if isinstance(data, dict) and "layers" in data:
        layers = _run_layers(data, Location(file=str(path)))
        return RecordedPlans(plans=plans_of(layers), costs=costs_of(layers))
    raise InputError("neither a plan file nor a run.json", where)


def _plan_entries(data: dict[str, Any], where: Location) -> dict[PlanKey, Mapping[str, Any]]:
    if data["opbench_plans"] != PLANS_FORMAT or not isinstance(data.get("plans"), list):
        raise InputError(f"not a plan file of format {PLANS_FORMAT}", where)
    plans = {}
    for entry in data["plans"]:
        try:
            key = plan_key(entry["model"], entry["layer"], entry["backend"])
            plans[key] = dict(entry["plan"])
        except (KeyError, TypeError):
            raise InputError("a plan entry lacks model, layer, backend or plan", where) from None
    return plans


def _run_layers(data: dict[str, Any], where: Location) -> list[LayerResult]:
    """The layer results of an already parsed run.json (its own mistakes said in words)."""
    from opbench.results.io import run_from_dict

    try:
        return list(run_from_dict(data).layers)
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        raise InputError(f"not an opbench run: {exc}", where) from None
