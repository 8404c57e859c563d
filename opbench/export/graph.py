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

    writer = _Writer(data, naming)
    for part in parts:
        writer.add(part)
    feeds = writer.feeds

    def value(name: str, shape: tuple[int, ...]):
        integer = name in feeds and feeds[name].dtype == np.int64  # token ids, masks
        kind = TensorProto.INT64 if integer else TensorProto.FLOAT
        return helper.make_tensor_value_info(name, kind, list(shape))

    graph = helper.make_graph(
        writer.nodes,
        graph_name,
        [value(i.name, i.shape) for i in writer.inputs],
        [value(o.name, o.shape) for o in writer.outputs],
        writer.initializers,
    )
    opsets = [helper.make_opsetid("", writer.opset)]
    proto = helper.make_model(graph, opset_imports=opsets, producer_name="opbench")
    # The lowest IR version that carries this opset: older runtimes and importers read it.
    proto.ir_version = helper.find_min_ir_version_for(opsets)
    onnx.checker.check_model(proto)
    return BuiltGraph(
        proto, tuple(writer.inputs), tuple(writer.outputs), feeds, writer.owners,
        writer.layer_nodes, writer.opset,
    )  # fmt: skip


@dataclass(frozen=True)
class _Outside:
    """A value the part reads but does not make: a model input, or a layer left out."""

    value: str


class _Writer:
    """The nodes, initializers and endpoints of the graph, part by part: each part's layers
    walked by `Graph.run`, whose values here are ONNX tensor names."""

    def __init__(self, data: SeededData, naming: Naming) -> None:
        self.data, self.naming = data, naming
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.inputs: list[Endpoint] = []
        self.outputs: list[Endpoint] = []
        self.feeds: dict[str, np.ndarray] = {}
        self.owners: dict[str, tuple[str, str]] = {}  # node name -> (model, layer)
        self.layer_nodes: dict[tuple[str, str], tuple[str, ...]] = {}
        self.opset = BASE_OPSET

    def add(self, part: Part) -> None:
        graph = part.model.graph
        members = [graph.index(layer.name) for layer in part.layers]
        model_inputs: dict[str, str] = {}  # a model input is one graph input for its readers

        def step(i: int, args: tuple[Any, ...]) -> str:
            layer = part.model.layers[i]
            xs = [
                self._graph_input(part, layer, position, x.value, model_inputs)
                if isinstance(x, _Outside)
                else x
                for position, x in enumerate(args)
            ]
            return self._layer(part.model, layer, xs)

        sources = {v: _Outside(v) for v in graph.external_inputs(members)}
        tensors = graph.run(step, sources, members, keep=members)
        for i in graph.ends(members):
            layer = part.model.layers[i]
            self.outputs.append(
                Endpoint(tensors[i], part.model.name, layer.name, layer.output_shape)
            )

    def _graph_input(
        self, part: Part, layer: LayerSpec, position: int, value: str, model_inputs: dict
    ) -> str:
        """The graph input a value made outside the part comes in by: a model input's one
        graph input, or a graph input of its own for each read of a layer left out."""
        if value in model_inputs:
            return model_inputs[value]
        model = part.model.name
        left_out = not part.model.graph.is_input(value)
        x = self.naming.graph_input(model, value, layer.name, position, left_out)
        self.inputs.append(Endpoint(x, model, layer.name, _input_shape(layer, position)))
        self.feeds[x] = self.data.input(part.model, layer, position)
        if not left_out:
            model_inputs[value] = x
        return x

    def _layer(self, model: ModelSpec, layer: LayerSpec, xs: list[str]) -> str:
        """The layer's nodes, reading tensors `xs`: its output tensor."""
        naming, name = self.naming, model.name
        layer_op = exporting_op(layer, name)
        scope = LayerScope(
            layer.name,
            lambda op, principal, k: naming.node(name, layer.name, op, principal, k),
            naming.prefix(name),
            self.nodes,
            self.initializers,
        )
        out = layer_op.to_onnx(
            scope, layer_op.input_arg(xs), self.data.weights(model, layer), layer
        )
        if scope.principal is not None:
            scope.principal.doc_string = layer_hint(layer)
        self.opset = max(self.opset, scope.opset)
        self.layer_nodes[(name, layer.name)] = tuple(scope.node_names)
        self.owners.update(dict.fromkeys(scope.node_names, (name, layer.name)))
        return out
