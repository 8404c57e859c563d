"""The suite side of matching: each model instance and its layers, in execution order,
built from a run (its suite spec where it lists them, else its layer results).

Pure Python: no torch, no triton.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from opbench.ops.registry import OPS


@dataclass(frozen=True)
class SuiteLayer:
    """One suite layer as matching sees it (op and shape feed the signature fallback)."""

    name: str
    index: int
    op: str | None = None
    output_shape: tuple[int, ...] | None = None
    reference_name: str | None = None
    #: The values the layer reads (earlier layers' names, model inputs'), from the suite spec;
    #: None where the run does not say (older runs: layers then read the one before).
    inputs: tuple[str, ...] | None = None
    #: The layer is a view of its input (`Op.view_layer` of its shapes and parameters, from
    #: the run's suite spec); None when the spec does not say (then the op's `is_view`).
    view: bool | None = None
    #: The activation the layer applies to its own output (`activation: relu` on a linear or
    #: conv2d, from the run's suite spec); None where it applies none or the spec does not say.
    activation: str | None = None

    def reads(self, other: SuiteLayer) -> bool:
        """Whether this layer reads `other`'s output (by the suite's graph, or, where the run
        does not record it, by list order: the layer just before)."""
        if self.inputs is not None:
            return other.name in self.inputs
        return other.index == self.index - 1

    @property
    def moves_data(self) -> bool:
        """False for a layer that is a view of its input (a flatten; a slice whose piece is
        contiguous): no engine times it, so no reference row needs to cover it."""
        if self.view is not None:
            return not self.view
        op = OPS.get(self.op) if self.op else None
        return not (op is not None and op.is_view)


def _view_of(spec_layer: Mapping[str, Any]) -> bool | None:
    """`Op.view_layer` of a suite-spec layer's recorded shapes and parameters, or None when
    they are missing or do not fit the op (an older or hand-edited run.json)."""
    op = OPS.get(spec_layer.get("op")) if isinstance(spec_layer.get("op"), str) else None
    shapes = spec_layer.get("input_shapes") or [spec_layer.get("input_shape")]
    params = spec_layer.get("params")
    if (
        op is None
        or not isinstance(params, Mapping)
        or not all(isinstance(s, (list, tuple)) for s in shapes)
    ):
        return None
    try:
        return bool(op.view_layer(op.shape_arg([tuple(s) for s in shapes]), params))
    except (ValueError, TypeError, KeyError, IndexError):  # ShapeError is a ValueError
        return None


def _activation_of(spec_layer: Mapping[str, Any]) -> str | None:
    """The `activation` parameter a suite-spec layer applies to its own output, or None."""
    params = spec_layer.get("params")
    act = params.get("activation") if isinstance(params, Mapping) else None
    return act if isinstance(act, str) and act.strip().casefold() != "none" else None


@dataclass(frozen=True)
class SuiteModel:
    """One model instance (e.g. ``mlp[batch=8]``) and its layers in execution order."""

    name: str
    base_name: str
    layers: tuple[SuiteLayer, ...]

    def layer_names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)


def base_name(model: str) -> str:
    """``mlp[batch=8]`` → ``mlp``."""
    return model.split("[", 1)[0]


def suite_models(
    suite_spec: Mapping[str, Any], layer_results: Iterable[Any]
) -> tuple[SuiteModel, ...]:
    """The run's models and layers: from run.suite_spec where it lists them, completed from the
    layer results (fused results expand to their members), in execution order."""
    order: dict[str, dict[str, dict[str, Any]]] = {}
    bases: dict[str, str] = {}
    spec_models = suite_spec.get("models") if isinstance(suite_spec, Mapping) else None
    for spec_model in spec_models or ():
        if not isinstance(spec_model, Mapping) or not isinstance(spec_model.get("name"), str):
            continue
        name = spec_model["name"]
        bases[name] = str(spec_model.get("base_name") or base_name(name))
        layers = order.setdefault(name, {})
        for spec_layer in spec_model.get("layers") or ():
            if isinstance(spec_layer, Mapping) and isinstance(spec_layer.get("name"), str):
                layers.setdefault(
                    spec_layer["name"],
                    {
                        "op": spec_layer.get("op"),
                        "output_shape": spec_layer.get("output_shape"),
                        "reference_name": spec_layer.get("reference_name"),
                        "inputs": spec_layer.get("inputs"),
                        "view": _view_of(spec_layer),
                        "activation": _activation_of(spec_layer),
                    },
                )
    with_results: set[str] = set()
    for result in layer_results:
        with_results.add(result.model)
        layers = order.setdefault(result.model, {})
        bases.setdefault(result.model, base_name(result.model))
        members = result.members
        for member in members:
            info = layers.setdefault(
                member, {"op": None, "output_shape": None, "reference_name": None}
            )
            if len(members) == 1:
                info["op"] = info.get("op") or result.op
                info["output_shape"] = info.get("output_shape") or result.output_shape
            info["reference_name"] = info.get("reference_name") or (
                result.reference_name if len(members) == 1 else None
            )
    models = []
    for name, layers in order.items():
        if name not in with_results:
            continue  # in the suite but not in this run (e.g. run with --model)
        models.append(
            SuiteModel(
                name=name,
                base_name=bases[name],
                layers=tuple(
                    SuiteLayer(
                        name=layer,
                        index=i,
                        op=info.get("op"),
                        output_shape=tuple(info["output_shape"])
                        if info.get("output_shape")
                        else None,
                        reference_name=info.get("reference_name"),
                        inputs=tuple(info["inputs"]) if info.get("inputs") else None,
                        view=info.get("view"),
                        activation=info.get("activation"),
                    )
                    for i, (layer, info) in enumerate(layers.items())
                ),
            )
        )
    return tuple(models)
