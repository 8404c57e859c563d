"""Reading an ONNX model's chain of supported nodes as suite layers (`opbench suite from-onnx`).

The graph is walked in node order from its one input. Each supported node (or pattern) becomes
one layer whose parameters come from the node's attributes and initializers, and whose input
shape comes from ONNX shape inference:

  Conv → conv2d · BatchNormalization → batchnorm2d · Relu/Gelu → relu/gelu ·
  Sigmoid·Mul(x, sigmoid(x)) → silu · MaxPool/AveragePool → maxpool2d/avgpool2d ·
  GlobalAveragePool (and ReduceMean over H, W) → avgpool2d over the whole map ·
  Gemm, MatMul(+Add of a bias) → linear · Softmax → softmax · LayerNormalization → layernorm ·
  Transpose → transpose (two dims swapped) or permute · Flatten/Reshape to (*dims, -1) → flatten

An activation node named `<layer>/<Op>` (how `opbench export` names a conv or linear layer's
fused activation) folds into that layer's `activation`. Constant nodes are data, not layers.

A node that is not supported, or whose input is not the previous layer's output (a branch:
residual adds, concats, a second path) is listed as `Unsupported` with its name and op type.

Layer names come from node names: the node's own name when it is a valid layer name, else
its torch module scope (`pkg.torch.onnx.name_scopes`) or its path (`/layer1/conv1/Conv` →
`layer1_conv1`); the node's name is then kept as the layer's `reference_name`.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from typing import Any

from opbench.errors import InputError

_VALID = re.compile(r"^[^\s/]+$")
_ACTIVATIONS = {"Relu": "relu", "Gelu": "gelu"}


@dataclass(frozen=True)
class Draft:
    """One layer read from the graph."""

    name: str
    op: str
    params: dict[str, Any]
    input_shape: tuple[int, ...]  # with the batch dimension
    output_shape: tuple[int, ...]
    fresh_input: bool  # the layer does not take the previous layer's output
    reference_name: str | None = None


@dataclass(frozen=True)
class Unsupported:
    name: str
    op_type: str
    reason: str


@dataclass
class Chain:
    layers: list[Draft] = field(default_factory=list)
    unsupported: list[Unsupported] = field(default_factory=list)
    # (index in `layers` the comment goes before, text) for nodes left out
    comments: list[tuple[int, str]] = field(default_factory=list)
    graph_name: str = ""
    batch: int = 1


class _Graph:
    """Shapes, constants and attributes of an ONNX graph, looked up by tensor name."""

    def __init__(self, proto: Any, batch: int | None) -> None:
        import onnx
        from onnx import numpy_helper, shape_inference

        inferred = shape_inference.infer_shapes(proto)
        graph = inferred.graph
        self.nodes = list(graph.node)
        self.constants: dict[str, Any] = {
            i.name: numpy_helper.to_array(i) for i in graph.initializer
        }
        for node in self.nodes:  # data, not layers: Constant, and Identity of a constant
            if node.op_type == "Constant":
                for attr in node.attribute:
                    if attr.name == "value":
                        self.constants[node.output[0]] = numpy_helper.to_array(attr.t)
            elif node.op_type == "Identity" and node.input[0] in self.constants:
                self.constants[node.output[0]] = self.constants[node.input[0]]
        inputs = [v for v in graph.input if v.name not in self.constants]
        if not inputs:
            raise InputError("the graph has no data input")
        # The first input feeds the model; others start chains of their own (as a suite
        # layer with its own `input`, which is how `opbench export` writes such models).
        self.inputs = [v.name for v in inputs]
        self.input = inputs[0].name
        self.shapes: dict[str, tuple[int | str, ...]] = {}
        for value in (*graph.input, *graph.value_info, *graph.output):
            dims = value.type.tensor_type.shape.dim
            self.shapes[value.name] = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims
            )
        first = self.shapes.get(self.input, ())
        if not first:
            raise InputError(f"graph input {self.input!r} has no known shape")
        if isinstance(first[0], str) or first[0] < 1:
            if batch is None:
                raise InputError(
                    f"graph input {self.input!r} has a symbolic batch dimension {first[0]!r}: give --batch N"
                )
            self._batch_symbol = first[0]
        else:
            self._batch_symbol = None
        self.batch = batch if batch is not None else int(first[0])
        self.helper = onnx.helper
        self.opset = max(
            (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=13
        )

    def shape(self, tensor: str) -> tuple[int, ...] | None:
        dims = self.shapes.get(tensor)
        if dims is None:
            return None
        if dims and dims[0] == self._batch_symbol:
            dims = (self.batch, *dims[1:])
        if any(not isinstance(d, int) or d < 1 for d in dims):
            return None
        return tuple(int(d) for d in dims)

    def attrs(self, node: Any) -> dict[str, Any]:
        return {a.name: self.helper.get_attribute_value(a) for a in node.attribute}

    def data_inputs(self, node: Any) -> list[str]:
        return list(dict.fromkeys(i for i in node.input if i and i not in self.constants))

    def consumers(self, tensor: str) -> list[Any]:
        return [n for n in self.nodes if tensor in n.input]


def _pair(values: list[int], what: str) -> list[int]:
    if len(values) != 2:
        raise ValueError(f"{what} {values} is not 2-D")
    return [int(v) for v in values]


def _symmetric_pads(pads: list[int]) -> list[int]:
    if not pads:
        return [0, 0]
    if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
        raise ValueError(f"pads {pads} are not symmetric")
    return [int(pads[0]), int(pads[1])]


def _auto_pad(attrs: dict[str, Any]) -> None:
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("NOTSET", "VALID"):
        raise ValueError(f"auto_pad={mode} is not supported (explicit pads are)")


def _conv(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    a = g.attrs(node)
    _auto_pad(a)
    weight = g.constants.get(node.input[1])
    if weight is None or weight.ndim != 4:
        raise ValueError("the weight is not a 4-D initializer")
    params: dict[str, Any] = {
        "out_channels": int(weight.shape[0]),
        "kernel_size": [int(weight.shape[2]), int(weight.shape[3])],
        "stride": _pair(a.get("strides", [1, 1]), "strides"),
        "padding": _symmetric_pads(a.get("pads", [])),
        "dilation": _pair(a.get("dilations", [1, 1]), "dilations"),
        "groups": int(a.get("group", 1)),
        "bias": len(node.input) > 2 and bool(node.input[2]),
    }
    defaults = {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1, "bias": True}
    return "conv2d", {k: v for k, v in params.items() if defaults.get(k, None) != v}


def _pool(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    a = g.attrs(node)
    _auto_pad(a)
    if a.get("ceil_mode", 0):
        raise ValueError("ceil_mode=1 is not supported")
    if any(d != 1 for d in a.get("dilations", [1, 1])):
        raise ValueError("dilated pooling is not supported")
    padding = _symmetric_pads(a.get("pads", []))
    if node.op_type == "AveragePool" and any(padding) and not a.get("count_include_pad", 0):
        raise ValueError("average pooling that excludes padding is not supported")
    kernel = _pair(a["kernel_shape"], "kernel_shape")
    params: dict[str, Any] = {"kernel_size": kernel}
    strides = _pair(a.get("strides", [1, 1]), "strides")
    if strides != kernel:
        params["stride"] = strides
    if any(padding):
        params["padding"] = padding
    return ("maxpool2d" if node.op_type == "MaxPool" else "avgpool2d"), params


def _global_pool(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    if len(in_shape) != 4:
        raise ValueError("global pooling needs a 4-D input")
    if node.op_type == "ReduceMean":
        axes = g.attrs(node).get("axes")
        if axes is None and len(node.input) > 1:
            axes = g.constants.get(node.input[1])
            axes = None if axes is None else [int(v) for v in axes]
        if sorted(int(v) % 4 for v in (axes or [])) != [2, 3] or not g.attrs(node).get(
            "keepdims", 1
        ):
            raise ValueError("only a mean over H and W that keeps dims is a global pooling")
    return "avgpool2d", {"kernel_size": [in_shape[2], in_shape[3]]}


def _gemm(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    a = g.attrs(node)
    if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
        raise ValueError("only Gemm with transA=0, alpha=beta=1 is a linear layer")
    weight = g.constants.get(node.input[1])
    if weight is None or weight.ndim != 2:
        raise ValueError("the weight is not a 2-D initializer")
    out = weight.shape[0] if a.get("transB", 0) else weight.shape[1]
    return "linear", {"out_features": int(out), "bias": len(node.input) > 2 and bool(node.input[2])}


def _matmul(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    weight = g.constants.get(node.input[1])
    if weight is None or weight.ndim != 2:
        raise ValueError("the right-hand side is not a 2-D initializer")
    return "linear", {"out_features": int(weight.shape[1]), "bias": False}


def _softmax(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    axis = int(g.attrs(node).get("axis", -1))
    if axis % len(in_shape) != len(in_shape) - 1 and g.opset < 13:
        raise ValueError("Softmax before opset 13 flattens the input; only the last axis maps")
    return "softmax", {"dim": axis}


def _layernorm(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    a = g.attrs(node)
    if int(a.get("axis", -1)) % len(in_shape) != len(in_shape) - 1:
        raise ValueError("only a layer norm over the last axis is supported")
    return "layernorm", {"eps": _eps(a)}


def _transpose(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    perm = [int(p) for p in g.attrs(node).get("perm", list(reversed(range(len(in_shape)))))]
    moved = [i for i, p in enumerate(perm) if p != i]
    if len(moved) == 2:
        return "transpose", {"dims": moved}
    return "permute", {"dims": perm}


def _flatten(
    g: _Graph, node: Any, in_shape: tuple[int, ...], out_shape: tuple[int, ...]
) -> tuple[str, dict[str, Any]]:
    for start in range(1, len(in_shape)):
        if out_shape == (*in_shape[:start], math.prod(in_shape[start:])):
            return "flatten", {"start_dim": start}
    raise ValueError(f"reshape {list(in_shape)} → {list(out_shape)} is not a flatten")


def _batchnorm(g: _Graph, node: Any, in_shape: tuple[int, ...]) -> tuple[str, dict[str, Any]]:
    if len(node.output) > 1 and any(node.output[1:]):
        raise ValueError("a training-mode batch norm (running statistics as outputs)")
    return "batchnorm2d", {"eps": _eps(g.attrs(node))}


def _eps(attrs: dict[str, Any]) -> float:
    """epsilon as written before it was stored in float32 (1e-05, not 9.9999997e-06)."""
    return float(f"{float(attrs.get('epsilon', 1e-5)):.7g}")


_READERS = {
    "Conv": _conv,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "ReduceMean": _global_pool,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Softmax": _softmax,
    "LayerNormalization": _layernorm,
    "Transpose": _transpose,
    "BatchNormalization": _batchnorm,
}


def layer_name(node: Any, index: int) -> tuple[str, str | None]:
    """(layer name, reference_name or None) from a node's name or its torch module scope."""
    raw = node.name or ""
    if raw and _VALID.match(raw):
        return raw, None
    scope = None
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = [str(s) for s in ast.literal_eval(prop.value) if s]
            except (ValueError, SyntaxError):
                scopes = []
            if len(scopes) >= 2:
                scope = scopes[-2]
    if scope is None and raw:
        parts = [p for p in raw.strip("/").split("/") if p]
        if len(parts) > 1 and parts[-1].split("_")[0] == node.op_type:
            parts = parts[:-1]
        scope = "_".join(parts)
    name = re.sub(r"[\s/]+", "_", scope or "").strip("_") or f"{node.op_type.lower()}{index}"
    return name, (raw or None)
