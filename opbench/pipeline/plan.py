"""Which results a run produces, in which order, and which share of a sharded run each is in.

Deterministic: every shard and every torchrun rank computes the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def plan_work(
    suite: SuiteSpec, options: RunOptions, backends: dict[str, Backend]
) -> list[WorkItem]:
    """Every result the run will produce, in order. Deterministic, so shards agree."""
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
    if options.shard:
        k, n = options.shard
        keys = [(item.model.name, item.layers[0].name) for item in items]
        items = [item for item, share in zip(items, shares(keys, n), strict=True) if share == k - 1]
    return items


def shares(keys: Sequence[tuple[str, str]], n: int) -> list[int]:
    """The share (0-based, of n) of each planned result, from its (model, first layer) key.

    Every backend's result for the same layer lands in the same share, so a layer's speed-up
    is always the ratio of two timings taken on one GPU, and the shares stay balanced however
    many backends a suite lists (plan order alternates backends: dealing results out one by
    one would give one rank every torch layer and another every triton layer)."""
    first_seen: dict[tuple[str, str], int] = {}
    for key in keys:
        first_seen.setdefault(key, len(first_seen))
    return [first_seen[key] % n for key in keys]


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
