"""One ONNX graph from layers of one or more suite models, with the suite's own seeded data.

Weights and inputs come from `ModelData` (opbench/pipeline/data.py), the one seeded-data
module: the same numbers `opbench run` checks against. Weights are rounded to the layer's
dtype and stored as float32, as the float64 reference sees them; so is the input.

Layers are connected as the model's graph says: each layer reads the values named in its
`inputs` (earlier layers' outputs, or model inputs), in that order. A value that is not made
inside the graph (a model input, or the output of a layer left out of this graph) becomes a
graph input fed with the suite's fixed data for that layer. Every layer whose output no kept
layer reads is a graph output, so no engine can drop a layer as dead code.

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

from opbench.export.onnx_ops import BASE_OPSET, LayerScope, exporting_op, layer_hint
from opbench.spec.model import LayerSpec, ModelSpec, SuiteSpec

MODEL_INPUT = "input"  # the model input of the one-input form


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

    def graph_input(
        self, model: str, value: str, reader: str, position: int, left_out: bool
    ) -> str:
        """The graph input for `value`, first read by layer `reader` as its input number
        `position`: a model input (`input`, a declared input's name, `<layer>/input` of a
        layer that sets its own input), or a layer left out of the graph (`left_out`)."""
        tail = f"_{position}" if position else ""
        if self.per_model_paths:
            return f"/{model}/{reader}/input{tail}"
        if left_out:
            return f"input_{reader}{tail}"
        if value.endswith("/input"):
            return f"input_{value[: -len('/input')]}"
        return value  # `input`, or a declared input's own name


LAYER_NAMES = Naming(per_model_paths=False)
PATH_NAMES = Naming(per_model_paths=True)


@dataclass(frozen=True)
class Part:
    """The layers of one model that go into the graph, in model order."""

    model: ModelSpec
    layers: tuple[LayerSpec, ...]


def _input_shape(layer: LayerSpec, position: int) -> tuple[int, ...]:
    shapes = tuple(getattr(layer, "input_shapes", ()) or ()) or (layer.input_shape,)
    return tuple(shapes[position])


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

    def input(self, model: ModelSpec, layer: LayerSpec, position: int = 0) -> np.ndarray:
        """The fixed data of the layer's input number `position`: what ModelData gives that
        layer (one tensor per value it reads: its producers' data)."""
        import torch

        x = self._model_data(model).inputs(model.layers.index(layer))[position]
        return (x.to(torch.float32) if x.is_floating_point() else x).numpy()


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
        names = {layer.name for layer in part.model.layers}
        tensor_of: dict[str, str] = {}  # value (layer or model input name) -> ONNX tensor
        read: set[str] = set()
        graph = part.model.graph
        for layer in part.layers:
            xs = []
            for position, value in enumerate(graph.reads[graph.index(layer.name)]):
                if value not in tensor_of:  # a model input, or a layer left out of the graph
                    left_out = value in names
                    x = naming.graph_input(model, value, layer.name, position, left_out)
                    inputs.append(Endpoint(x, model, layer.name, _input_shape(layer, position)))
                    feeds[x] = data.input(part.model, layer, position)
                    if not left_out:  # a model input is one graph input for all its readers
                        tensor_of[value] = x
                    xs.append(x)
                    continue
                xs.append(tensor_of[value])
                read.add(value)
            layer_op = exporting_op(layer, model)
            scope = LayerScope(
                layer.name,
                lambda op, principal, k, _l=layer.name, _m=model: naming.node(
                    _m, _l, op, principal, k
                ),
                naming.prefix(model),
                nodes,
                initializers,
            )
            tensor_of[layer.name] = layer_op.to_onnx(
                scope, layer_op.input_arg(xs), data.weights(part.model, layer), layer
            )
            if scope.principal is not None:
                scope.principal.doc_string = layer_hint(layer)
            opset = max(opset, scope.opset)
            layer_nodes[(model, layer.name)] = tuple(scope.node_names)
            owners.update(dict.fromkeys(scope.node_names, (model, layer.name)))
        for layer in part.layers:
            if layer.name not in read:
                outputs.append(
                    Endpoint(tensor_of[layer.name], model, layer.name, layer.output_shape)
                )

    def value(name: str, shape: tuple[int, ...]):
        integer = name in feeds and feeds[name].dtype == np.int64  # token ids, masks
        kind = TensorProto.INT64 if integer else TensorProto.FLOAT
        return helper.make_tensor_value_info(name, kind, list(shape))

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
