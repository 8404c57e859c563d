"""Which results a run produces, in which order, and which share of a sharded run each is in.

Deterministic: every shard and every torchrun rank computes the same plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opbench.backends.base import Backend
from opbench.backends.registry import all_backends
from opbench.pipeline.measure import base_result
from opbench.pipeline.options import RunOptions, WorkItem
from opbench.results.model import LayerResult
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec


def _model_selected(model: ModelSpec, names: Sequence[str]) -> bool:
    return not names or model.name in names or model.base_name in names


def select_models(suite: SuiteSpec, options: RunOptions) -> list[ModelSpec]:
    return [m for m in suite.models if _model_selected(m, options.models)]


@dataclass(frozen=True)
class EndToEndUnit:
    """One model's whole forward on one backend, checked and timed (eager and CUDA graph):
    planned as a unit of its own, so that a share that owns it builds every group it needs,
    whichever shares time those groups' layers."""

    model: ModelSpec
    backend: str
    groups: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Plan:
    """What a run (or one share of it) produces: layer results and whole-model units."""

    items: list[WorkItem]
    end_to_end: list[EndToEndUnit]


# The share key of a model's whole-model units: every backend's forward of one model lands in
# the same share, so a whole-model speed-up is the ratio of two timings taken on one GPU.
END_TO_END = "(end to end)"


def plan_work(
    suite: SuiteSpec, options: RunOptions, backends: dict[str, Backend]
) -> list[WorkItem]:
    """Every result the run will produce, in order. Deterministic, so shards agree."""
    return plan_run(suite, options, backends).items


def plan_run(suite: SuiteSpec, options: RunOptions, backends: dict[str, Backend]) -> Plan:
    """The layer results and whole-model units of the run, or of its share (`options.shard`),
    in order. Deterministic, so every shard and rank computes the same plan."""
    items = _all_items(suite, options, backends)
    units = _end_to_end_units(items, options)
    if not options.shard:
        return Plan(items, units)
    k, n = options.shard
    owners = deal(items, units, n, options.device, options.costs)
    own = [o == k - 1 for o in owners]
    return Plan(
        [item for item, mine in zip(items, own, strict=False) if mine],
        [unit for unit, mine in zip(units, own[len(items) :], strict=True) if mine],
    )


def _all_items(
    suite: SuiteSpec, options: RunOptions, backends: dict[str, Backend]
) -> list[WorkItem]:
    items: list[WorkItem] = []
    for model in select_models(suite, options):
        for name in _backend_order(model, options):
            backend = backends[name]
            for group in backend.plan(model):
                layers = [model.layers[i] for i in group]
                if not all(name in layer_backends(layer, options) for layer in layers):
                    groups = [(i,) for i in group]
                else:
                    groups = [group]
                for g in groups:
                    if name not in layer_backends(model.layers[g[0]], options):
                        continue
                    if options.layers and not any(
                        model.layers[i].name in options.layers for i in g
                    ):
                        continue
                    items.append(WorkItem(model, g, name))
    return items


def _end_to_end_units(items: list[WorkItem], options: RunOptions) -> list[EndToEndUnit]:
    """A unit per (model, backend) whose forward is more than one group: a model of one group
    has no forward beyond that result. None when a --layer selection leaves models partial."""
    if not options.end_to_end or options.layers:
        return []
    groups: dict[tuple[str, str], list[WorkItem]] = {}
    for item in items:
        groups.setdefault((item.model.name, item.backend), []).append(item)
    return [
        EndToEndUnit(found[0].model, backend, tuple(i.indices for i in found))
        for (_, backend), found in groups.items()
        if len(found) > 1
    ]


def deal(
    items: Sequence[WorkItem],
    units: Sequence[EndToEndUnit],
    n: int,
    device: str = "cpu",
    costs: Mapping[tuple[str, str, str], float] | None = None,
) -> list[int]:
    """The share (0-based) of every item, then of every unit, in that order. Layer results go
    by (model, first layer), whole-model units by (model, END_TO_END); costs are a previous
    run's wall seconds where `costs` has them (by model, layer, backend), else expected."""
    item_costs = [item_cost(item, device, costs) for item in items]
    keys = [(item.model.name, item.layers[0].name) for item in items]
    by_key = dict(
        zip(((i.model.name, i.indices, i.backend) for i in items), item_costs, strict=True)
    )
    for unit in units:
        keys.append((unit.model.name, END_TO_END))
        item_costs.append(unit_cost(unit, by_key))
    return shares(keys, n, item_costs)


def item_cost(
    item: WorkItem, device: str, costs: Mapping[tuple[str, str, str], float] | None = None
) -> float:
    known = (costs or {}).get((item.model.name, item.layers[0].name, item.backend))
    return round(known, 2) if known is not None else expected_cost(base_result(item, device))


# A whole-model unit builds every group of its forward (the build and the one-call check of a
# layer result, about half of its cost) and then times two modes of one forward.
END_TO_END_BUILD_SHARE = 0.5


def unit_cost(unit: EndToEndUnit, costs: Mapping[tuple, float]) -> float:
    build = sum(costs.get((unit.model.name, g, unit.backend), FIXED_COST_S) for g in unit.groups)
    return round(FIXED_COST_S * 2 + END_TO_END_BUILD_SHARE * build, 2)


# The expected wall time of one result: a fixed part (build, check, the timing budget) and
# parts that grow with the work (the float64/float32 reference, weights drawn on the CPU,
# longer calls). Rough rates; only the ratios between layers matter for balancing.
FIXED_COST_S = 0.5
REFERENCE_FLOPS_PER_S = 2e12
DATA_BYTES_PER_S = 1e9


def expected_cost(result: LayerResult) -> float:
    """Expected wall seconds to produce a planned result, from its FLOPs and bytes; rounded to
    10 ms, so that layers of about the same cost are dealt in plan order, not by noise."""
    work = result.flops / REFERENCE_FLOPS_PER_S + result.bytes / DATA_BYTES_PER_S
    return round(FIXED_COST_S + work, 2)


def shares(
    keys: Sequence[tuple[str, str]], n: int, costs: Sequence[float] | None = None
) -> list[int]:
    """The share (0-based, of n) of each planned result, from its (model, first layer) key.

    Every backend's result for the same layer lands in the same share, so a layer's speed-up
    is always the ratio of two timings taken on one GPU. Layers are dealt by expected cost
    (the sum over their results of `costs`, one per key; equal when None): the most expensive
    first, each to the share with the least cost so far (longest-processing-time first), so
    one huge GEMM does not land on a share that also gets a fair count of others.
    Deterministic: ties go to the lower share and to the layer planned first."""
    weights = [1.0] * len(keys) if costs is None else list(costs)
    per_key: dict[tuple[str, str], float] = {}
    for key, cost in zip(keys, weights, strict=True):
        per_key[key] = per_key.get(key, 0.0) + cost
    load = [0.0] * n
    owner: dict[tuple[str, str], int] = {}
    # sorted() is stable: among equal costs the layer planned first is dealt first.
    for key in sorted(per_key, key=lambda k: -per_key[k]):
        share = min(range(n), key=lambda s: (load[s], s))
        owner[key] = share
        load[share] += per_key[key]
    return [owner[key] for key in keys]


def share_walls(
    plan: Plan,
    owners: Sequence[int],
    runs: Mapping[int, Any],
    costs: Mapping[tuple[str, str, str], float] | None = None,
) -> dict:
    """Per rank (as a string key, for JSON): the expected cost of its share (the same figures
    `deal` balanced on) and the wall seconds its run took, from its own clock stamps."""
    from datetime import datetime

    item_costs = [item_cost(i, "cpu", costs) for i in plan.items]
    by_key = {
        (i.model.name, i.indices, i.backend): c for i, c in zip(plan.items, item_costs, strict=True)
    }
    costs = item_costs + [unit_cost(u, by_key) for u in plan.end_to_end]
    walls: dict[str, dict[str, float | None]] = {}
    for owner, cost in zip(owners, costs, strict=True):
        entry = walls.setdefault(str(owner), {"expected_s": 0.0, "actual_s": None})
        entry["expected_s"] = round(entry["expected_s"] + cost, 2)
    for rank, run in runs.items():
        entry = walls.setdefault(str(rank), {"expected_s": 0.0, "actual_s": None})
        if run.started_at and run.finished_at:
            took = datetime.fromisoformat(run.finished_at) - datetime.fromisoformat(run.started_at)
            entry["actual_s"] = took.total_seconds()
    return walls


def layer_backends(layer: LayerSpec, options: RunOptions) -> tuple[str, ...]:
    """The backends a layer runs on: `--backend`'s list when given (it replaces the suite's
    lists, so an asked backend runs every layer, or says why it cannot), else the suite's."""
    return tuple(options.backends) if options.backends else layer.backends


def _backend_order(model: ModelSpec, options: RunOptions) -> list[str]:
    order: dict[str, None] = {}
    for layer in model.layers:
        for name in layer_backends(layer, options):
            order.setdefault(name, None)
    return list(order)


def planned_results(suite: SuiteSpec, options: RunOptions) -> list[LayerResult]:
    """Every result the (unsharded) run would produce, as empty results in plan order."""
    backends = all_backends()
    return [
        base_result(item, options.device, options.gpu_label)
        for item in plan_work(suite, options, backends)
    ]
