"""The compared models' graphs, as the comparison keeps them for the reports: each layer's name,
op and the values it reads, in walk order, taken from the run's suite spec.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opbench.spec.wiring import recorded_graph


@dataclass(frozen=True)
class GraphLayer:
    """One layer of a model's graph: its name, op, and the values it reads (layer names or
    model inputs), in its `inputs:` order."""

    name: str
    op: str
    inputs: tuple[str, ...] = ()


def model_graphs(
    suite_spec: Mapping[str, Any], models: Iterable[str]
) -> dict[str, tuple[GraphLayer, ...]]:
    """model name → its layers (walk order), for the named models the suite spec lists with
    their layers, as `recorded_graph` reads them."""
    wanted = set(models)
    out: dict[str, tuple[GraphLayer, ...]] = {}
    spec_models = suite_spec.get("models") if isinstance(suite_spec, Mapping) else None
    for model in spec_models or ():
        if not isinstance(model, Mapping) or model.get("name") not in wanted:
            continue
        graph = recorded_graph(model)  # spec/wiring.py: the one reader of older run.json
        ops = {la.get("name"): la.get("op") for la in model.get("layers") or ()
               if isinstance(la, Mapping)}  # fmt: skip
        layers = tuple(GraphLayer(name, str(ops.get(name) or "?"), graph.reads[i])
                       for i, name in enumerate(graph.names))  # fmt: skip
        if layers:
            out[str(model["name"])] = layers
    return out
