"""Cutting a whole-model ONNX graph into one single-output model per layer.

Engines that time whole models only (SAS through DLPy) get a layer's time from the times of
models cut out of the whole one. The cut of layer k is its *ancestor set* A(k): k and every
layer it reads from, directly or not, down to the model inputs. It has exactly one output
(every other member leads to k), reads only the inputs k depends on, and holds nothing but
the model's own layers; for a chain it is the prefix "layers 1 … k". docs/sas.md says how
layer times follow from cut times.

Everything here works on the ONNX graph and a list of layers (name, node names): it knows
nothing of suites. A layer's *output* is the one tensor of its nodes that another layer or
the graph's outputs read; a layer's *reads* are the layers and graph inputs its nodes read.

`externalize` moves the weights of a model into one file beside it (ONNX external data), so
that every cut can point at the same bytes instead of holding its own copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from opbench.errors import InputError
from opbench.spec.graph import Graph, Row

# Tensors smaller than this stay inside each .onnx file (shapes, axes, scalars such as a
# Clip's bounds, which export reads without loading the weights file).
INLINE_BYTES = 128


@dataclass(frozen=True)
class LayerGraph:
    """The layers of one ONNX model, in the model's walk order, and who reads whom.

    names: layer names, walk order.
    nodes: per layer, its node names in graph order.
    reads: per layer, what it reads: other layers (by name) or graph inputs (by tensor name),
        in the order its nodes first read them.
    outputs: per layer, its output tensor.
    inputs: the graph's data inputs (not initializers), in graph order.
    """

    names: tuple[str, ...]
    nodes: tuple[tuple[str, ...], ...]
    reads: tuple[tuple[str, ...], ...]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]

    def index(self, name: str) -> int:
        return self.names.index(name)

    @cached_property
    def graph(self) -> Graph:
        """The layer-level graph (spec/graph.py), from these rows: its ancestor sets are the
        cuts."""
        return Graph.from_rows([Row(n, r) for n, r in zip(self.names, self.reads, strict=True)])

    def graph_inputs_of(self, members: Iterable[int]) -> tuple[str, ...]:
        """The graph inputs a set of layers reads, in graph order."""
        read = {r for k in members for r in self.reads[k]}
        return tuple(i for i in self.inputs if i in read)


@dataclass(frozen=True)
class Cut:
    """The model cut after one layer: its ancestor set, its inputs and its one output."""

    number: int  # 1-based, in walk order
    layer: int
    members: tuple[int, ...]  # layer indices, walk order
    inputs: tuple[str, ...]  # graph input tensors it reads
    output: str  # its output tensor (the layer's)


def layer_graph(proto: Any, layers: Sequence[tuple[str, Sequence[str]]]) -> LayerGraph:
    """The layer-level graph of an ONNX model whose nodes are grouped into `layers`
    (name, node names), in walk order. Every node must belong to exactly one layer, and a
    layer may only read layers listed before it."""
    graph = proto.graph
    owner: dict[str, int] = {}
    for k, (name, nodes) in enumerate(layers):
        for node in nodes:
            if node in owner:
                raise InputError(
                    f"ONNX node {node!r} is in layers {layers[owner[node]][0]!r} and {name!r}"
                )
            owner[node] = k
    weights = {t.name for t in graph.initializer}
    data_inputs = tuple(v.name for v in graph.input if v.name not in weights)
    made_by: dict[str, int] = {}  # tensor -> layer that makes it
    for node in graph.node:
        if node.name not in owner:
            raise InputError(f"ONNX node {node.name!r} ({node.op_type}) belongs to no layer")
        for out in node.output:
            if out:
                made_by[out] = owner[node.name]
    reads: list[list[str]] = [[] for _ in layers]
    read_outside: dict[int, set[str]] = {}  # layer -> its tensors other layers read
    for node in graph.node:
        k = owner[node.name]
        for tensor in node.input:
            if not tensor or tensor in weights:
                continue
            producer = made_by.get(tensor)
            if producer is None:
                if tensor not in data_inputs:
                    continue  # a Constant's output or an optional input: no data edge
                source = tensor
            elif producer == k:
                continue
            else:
                if producer > k:
                    raise InputError(
                        f"layer {layers[k][0]!r} reads {layers[producer][0]!r}, which comes "
                        "after it: layers must be in topological order"
                    )
                source = layers[producer][0]
                read_outside.setdefault(producer, set()).add(tensor)
            if source not in reads[k]:
                reads[k].append(source)
    for out in graph.output:
        if out.name in made_by:
            read_outside.setdefault(made_by[out.name], set()).add(out.name)
    outputs = []
    for k, (name, _nodes) in enumerate(layers):
        leaving = read_outside.get(k, set())
        if len(leaving) > 1:
            raise InputError(
                f"layer {name!r} has several output tensors ({', '.join(sorted(leaving))}): "
                "a cut needs one"
            )
        if leaving:
            outputs.append(next(iter(leaving)))
            continue
        node = next((n for n in reversed(graph.node) if owner.get(n.name) == k), None)
        if node is None:
            raise InputError(f"layer {name!r} has no ONNX node")
        outputs.append(node.output[0])
    return LayerGraph(
        names=tuple(name for name, _ in layers),
        nodes=tuple(tuple(nodes) for _, nodes in layers),
        reads=tuple(tuple(r) for r in reads),
        outputs=tuple(outputs),
        inputs=data_inputs,
    )


def ancestor_cuts(graph: LayerGraph) -> tuple[Cut, ...]:
    """One cut per layer, in walk order."""
    return tuple(
        Cut(
            number=k + 1,
            layer=k,
            members=tuple(sorted(members)),
            inputs=graph.graph_inputs_of(members),
            output=graph.outputs[k],
        )
        for k, members in enumerate(graph.graph.ancestor_sets)
    )


def value_shapes(proto: Any) -> dict[str, Any]:
    """ValueInfo of every tensor of the model (inputs, outputs, inferred intermediates)."""
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(proto)
    graph = inferred.graph
    return {v.name: v for v in [*graph.input, *graph.value_info, *graph.output]}


def cut_model(proto: Any, graph: LayerGraph, cut: Cut, shapes: dict[str, Any], name: str) -> Any:
    """The ONNX model of one cut: its members' nodes in graph order, the initializers they
    use (as they are in `proto`: external references stay references), its inputs, and its
    one output with the shape from `shapes`."""
    from onnx import helper

    keep = {node for k in cut.members for node in graph.nodes[k]}
    nodes = [n for n in proto.graph.node if n.name in keep]
    used = {t for n in nodes for t in n.input}
    initializers = [t for t in proto.graph.initializer if t.name in used]
    inputs = [v for v in proto.graph.input if v.name in cut.inputs]
    if cut.output not in shapes:
        raise InputError(
            f"cut {cut.number} ({graph.names[cut.layer]!r}): no shape for {cut.output!r}"
        )
    body = helper.make_graph(nodes, name, inputs, [shapes[cut.output]], initializers)
    out = helper.make_model(body, opset_imports=list(proto.opset_import), producer_name="opbench")
    out.ir_version = proto.ir_version
    return out


def externalize(proto: Any, folder: Path, location: str) -> int:
    """Move every initializer of at least INLINE_BYTES into FOLDER/LOCATION (one file) and
    make `proto` refer to it (ONNX external data, offsets aligned to 64 bytes). Returns the
    bytes written. `proto` is changed in place; copies of its initializers made afterwards
    refer to the same file."""
    from onnx import TensorProto, external_data_helper

    written = 0
    with open(folder / location, "wb") as fh:
        for tensor in proto.graph.initializer:
            if tensor.data_location == TensorProto.EXTERNAL or not tensor.HasField("raw_data"):
                continue
            data = tensor.raw_data
            if len(data) < INLINE_BYTES:
                continue
            pad = -written % 64
            fh.write(b"\0" * pad)
            written += pad
            fh.write(data)
            external_data_helper.set_external_data(tensor, location, written, len(data))
            tensor.ClearField("raw_data")
            written += len(data)
    return written
