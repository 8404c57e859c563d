"""One ONNX graph from layers of one or more suite models, with the suite's own seeded data.

Weights and inputs come from `ModelData` (opbench/pipeline/data.py), the one seeded-data
module: the same numbers `opbench run` checks against. Weights are rounded to the layer's
dtype and stored as float32, as the float64 reference sees them; so is the input.

Layers of a model are chained: a layer takes the previous kept layer's output when that is
what it reads (`LayerSpec.inputs`), else a fresh graph input (where the model starts, where a
layer sets its own `input` or reads another branch, or after a layer that was left out). Joins
(layers reading several values) are refused for now. Every chain end is a graph output, so no
engine can drop a layer as dead code.

Two naming schemes (`Naming`):
- LAYER_NAMES, for the files `opbench export` writes: a layer's first node is named exactly
  like the layer (`conv1`); its other nodes `conv1/Relu`, `fc/Add`, `act/Mul`…
- PATH_NAMES, for several models in one graph (ONNX Runtime profiling):
  `/<model>/<layer>/<OpType>[_k]`, which the onnxruntime reader matches to model and layer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opbench.errors import InputError
from opbench.export.onnx_ops import BASE_OPSET, LayerScope, emitter_for
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec


@dataclass(frozen=True)
class Naming:
    """How nodes, initializers and graph inputs are named."""

    per_model_paths: bool

    def node(self, model: str, layer: str, op_type: str, principal: bool, k: int) -> str:
        if self.per_model_paths:
            return f"/{model}/{layer}/{op_type}" + (f"_{k}" if k else "")
        if principal:
            return layer
        return f"{layer}/{op_type}" + (f"_{k}" if k else "")

    def prefix(self, model: str) -> str:
        return f"/{model}/" if self.per_model_paths else ""

    def graph_input(self, model: str, layer: str, first: bool) -> str:
        if self.per_model_paths:
            return f"/{model}/{layer}/input"
        return "input" if first else f"input_{layer}"


LAYER_NAMES = Naming(per_model_paths=False)
PATH_NAMES = Naming(per_model_paths=True)


@dataclass(frozen=True)
class Part:
    """The layers of one model that go into the graph, in model order."""

    model: ModelSpec
    layers: tuple[LayerSpec, ...]

    def fresh_inputs(self) -> tuple[bool, ...]:
        """For each kept layer: does it take a fresh graph input? Yes, unless it reads exactly
        the previous kept layer's output (a layer reading a model input, another branch, or a
        layer left out gets its own input, with the data the suite gives it)."""
        out = []
        previous: LayerSpec | None = None
        for layer in self.layers:
            out.append(previous is None or layer.inputs != (previous.name,))
            previous = layer
        return tuple(out)


@dataclass(frozen=True)
class Endpoint:
    """A graph input or output: its tensor name, the layer it feeds or ends, its shape."""

    name: str
    model: str
    layer: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class BuiltGraph:
    """An ONNX model and what an engine needs to run it."""

    proto: Any  # onnx.ModelProto
    inputs: tuple[Endpoint, ...]
    outputs: tuple[Endpoint, ...]
    feeds: dict[str, np.ndarray] = field(repr=False)
    owners: dict[str, tuple[str, str]]  # node name -> (model, layer)
    layer_nodes: dict[tuple[str, str], tuple[str, ...]]  # (model, layer) -> its node names
    opset: int


class SeededData:
    """Seeded weights and inputs of every model, as float32 numpy, from ModelData (cached)."""

    def __init__(self, suite: SuiteSpec) -> None:
        self.suite = suite
        self._data: dict[str, Any] = {}

    def _model_data(self, model: ModelSpec):
        from opbench.pipeline.data import ModelData

        if model.name not in self._data:
            self._data[model.name] = ModelData(self.suite, model, "cpu")
        return self._data[model.name]

    def weights(self, model: ModelSpec, layer: LayerSpec) -> dict[str, np.ndarray]:
        import torch

        from opbench.backends.base import torch_dtype

        raw = self._model_data(model).weights(model.layers.index(layer))
        stored = torch_dtype(layer.dtype)
        return {k: v.to(stored).to(torch.float32).numpy() for k, v in raw.items()}

    def input(self, model: ModelSpec, layer: LayerSpec) -> np.ndarray:
        import torch

        x = self._model_data(model).input(model.layers.index(layer))
        return x.to(torch.float32).numpy()


def build_graph(
    parts: Sequence[Part], data: SeededData, naming: Naming, graph_name: str
) -> BuiltGraph:
    """The ONNX model of these layers: float32, the suite's seeded weights as initializers."""
    import onnx
    from onnx import TensorProto, helper

    nodes: list[Any] = []
    initializers: list[Any] = []
    inputs: list[Endpoint] = []
    outputs: list[Endpoint] = []
    feeds: dict[str, np.ndarray] = {}
    owners: dict[str, tuple[str, str]] = {}
    layer_nodes: dict[tuple[str, str], tuple[str, ...]] = {}
    opset = BASE_OPSET
    for part in parts:
        model = part.model.name
        x: str | None = None
        last: LayerSpec | None = None
        for layer, fresh in zip(part.layers, part.fresh_inputs(), strict=True):
            if len(layer.inputs) > 1:
                # Joins need a graph-aware export (the ONNX nodes would read one input).
                raise InputError(
                    f"model {model!r}, layer {layer.name!r}: reads {len(layer.inputs)} inputs; "
                    "the ONNX export does not write joins yet"
                )
            if fresh:
                if x is not None and last is not None:
                    outputs.append(Endpoint(x, model, last.name, last.output_shape))
                x = naming.graph_input(model, layer.name, first=not inputs)
                inputs.append(Endpoint(x, model, layer.name, layer.input_shape))
                feeds[x] = data.input(part.model, layer)
            emit = emitter_for(layer, model)
            scope = LayerScope(
                layer.name,
                lambda op, principal, k, _l=layer.name, _m=model: naming.node(
                    _m, _l, op, principal, k
                ),
                naming.prefix(model),
                nodes,
                initializers,
            )
            assert x is not None
            x = emit(scope, x, data.weights(part.model, layer), layer)
            opset = max(opset, scope.opset)
            layer_nodes[(model, layer.name)] = tuple(scope.node_names)
            owners.update(dict.fromkeys(scope.node_names, (model, layer.name)))
            last = layer
        if x is not None and last is not None:
            outputs.append(Endpoint(x, model, last.name, last.output_shape))

    def value(name: str, shape: tuple[int, ...]):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))

    graph = helper.make_graph(
        nodes,
        graph_name,
        [value(i.name, i.shape) for i in inputs],
        [value(o.name, o.shape) for o in outputs],
        initializers,
    )
    opsets = [helper.make_opsetid("", opset)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="opbench")
    # The lowest IR version that carries this opset: older runtimes and importers read it.
    proto.ir_version = helper.find_min_ir_version_for(opsets)
    onnx.checker.check_model(proto)
    return BuiltGraph(proto, tuple(inputs), tuple(outputs), feeds, owners, layer_nodes, opset)
