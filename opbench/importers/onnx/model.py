"""What the importer makes of an ONNX graph: layers with named inputs, and a record of every node.

Every node of the file ends in exactly one place (`Imported.accounted` checks it):
- in a layer (`Layer.nodes`: the node itself, or a pattern it is part of);
- absorbed (`Absorbed`): shape arithmetic folded into constants, or a reshape/transpose that
  only relabels memory (a view), with the layer that reads through it;
- unsupported (`Unsupported`): listed for the user, and with `--skip-unsupported` a
  placeholder layer that keeps the graph connected.

Pure Python (no onnx, no torch): the CLI renders these, run.json keeps them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]


@dataclass(frozen=True)
class ModelInput:
    """A model input: the ONNX input (`source` = its name) or a constant that a join reads
    (`constant` = its initializer's name; `opbench run model.onnx` feeds the file's values)."""

    name: str
    shape: Shape  # batch first
    source: str
    constant: str | None = None
    batch_axis: int = 0  # where the batch sits in the ONNX tensor (the suite puts it first)
    rank: int = 0  # a constant: the rank of the tensor it joins (ONNX broadcasts it to that)
    dtype: str | None = None  # "int64": integer ids (the suite draws them in range); None: floats
    padding_mask: bool = False  # int64 0/1 key padding mask (an attention's `mask` input)


@dataclass(frozen=True)
class Layer:
    """One suite layer. `inputs` name earlier layers or model inputs, in the op's order.

    nodes: the ONNX nodes this layer computes (its principal node first).
    absorbed: view nodes (reshape/transpose/…) between its inputs and it that move no data here.
    weights: the op's weight key → the ONNX initializer holding it, and how to read it
        (`transpose`: stored as Wᵀ, as MatMul keeps it).
    """

    name: str
    op: str
    params: dict[str, Any]
    inputs: tuple[str, ...]
    input_shapes: tuple[Shape, ...]
    output_shape: Shape
    nodes: tuple[str, ...]
    reference_name: str | None = None
    module: str = ""
    absorbed: tuple[str, ...] = ()
    weights: dict[str, tuple[str, str]] = field(default_factory=dict)
    placeholder_for: str | None = None  # the ONNX op type a --skip-unsupported layer stands for


@dataclass(frozen=True)
class Absorbed:
    node: str
    op_type: str
    why: str  # "constant" (folded) or "view" (relabels memory) or "unused"
    into: str | None = None  # the layer that reads through it, if any


@dataclass(frozen=True)
class Unsupported:
    node: str
    op_type: str
    module: str
    reason: str


@dataclass(frozen=True)
class Output:
    """A model output: the ONNX output and the layer whose canonical tensor it is a view of."""

    name: str
    layer: str
    shape: Shape  # the ONNX output's shape
    batch_axis: int | None


@dataclass
class Imported:
    graph_name: str
    producer: str
    batch: int
    batch_axis: int
    static_batch: bool = True  # the file fixes its batch (else it was symbolic: --batch)
    file_batch: int = 0  # the batch the graph was read at (`batch` may be set to another)
    inputs: list[ModelInput] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)
    absorbed: list[Absorbed] = field(default_factory=list)
    unsupported: list[Unsupported] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    node_count: int = 0
    node_names: list[str] = field(default_factory=list)  # every node of the file, in order
    # Reads a constant of the prepared model by value name (weights, constant inputs): what
    # `opbench run model.onnx` feeds the layers. Not part of the record.
    read: Any = field(default=None, repr=False, compare=False)
    notes: list[str] = field(default_factory=list)

    def unsupported_by_type(self) -> list[tuple[str, int, list[Unsupported]]]:
        """(op type, count, nodes) by descending count: how the CLI lists them."""
        counts = Counter(u.op_type for u in self.unsupported)
        return [
            (op, n, [u for u in self.unsupported if u.op_type == op])
            for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        ]

    def accounted(self) -> Counter:
        """In how many places each node is accounted for: layers (a node may make several
        layers, a Gather a slice and a reshape: one place), absorbed, unsupported (its
        placeholder layer is the same place). Each must be exactly 1."""
        in_layers = {n for layer in self.layers for n in layer.nodes}
        seen: Counter = Counter(in_layers)
        seen.update(a.node for a in self.absorbed)
        seen.update(u.node for u in self.unsupported if u.node not in in_layers)
        return seen

    def record(self) -> dict[str, Any]:
        """The import as plain data, for run.json."""
        return {
            "graph": self.graph_name,
            "producer": self.producer,
            "batch_axis": self.batch_axis,
            "nodes": self.node_count,
            "layers": {layer.name: list(layer.nodes) for layer in self.layers},
            "absorbed": [
                {"node": a.node, "op_type": a.op_type, "why": a.why, "into": a.into}
                for a in self.absorbed
            ],
            "unsupported": [
                {"node": u.node, "op_type": u.op_type, "module": u.module, "reason": u.reason}
                for u in self.unsupported
            ],
        }
