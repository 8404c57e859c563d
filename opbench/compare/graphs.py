"""The compared models' graphs, as the comparison keeps them for the reports: each layer's name,
op and the values it reads, in walk order, taken from the run's suite spec.

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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
    their layers. A run.json from before graphs (no `inputs`) reads as a chain."""
    wanted = set(models)
    out: dict[str, tuple[GraphLayer, ...]] = {}
    spec_models = suite_spec.get("models") if isinstance(suite_spec, Mapping) else None
    for model in spec_models or ():
        if not isinstance(model, Mapping) or model.get("name") not in wanted:
            continue
        layers: list[GraphLayer] = []
        for layer in model.get("layers") or ():
            if not isinstance(layer, Mapping) or not isinstance(layer.get("name"), str):
                continue
            inputs = layer.get("inputs")
            if not isinstance(inputs, (list, tuple)) or not inputs:
                inputs = [layers[-1].name] if layers else ["input"]
            layers.append(GraphLayer(layer["name"], str(layer.get("op") or "?"),
                                     tuple(str(v) for v in inputs)))  # fmt: skip
        if layers:
            out[str(model["name"])] = tuple(layers)
    return out
