"""The ONNX form of each suite op: the nodes one layer becomes, written directly with onnx.helper.

Each emitter gets a `LayerScope` (which names nodes and initializers after the layer), the
layer's input tensor name, its weights (numpy float32) and its LayerSpec, and returns the
name of the layer's output tensor. The forms are the plain ONNX operators engines import
(DLPy's importer knows Conv, BatchNormalization, Gemm, MatMul, Add, pools, Relu, Flatten,
Softmax), and compute exactly what the op's torch `forward` computes:

- linear: Gemm (transB=1) on 2-D input; MatMul with Wᵀ, then Add for the bias, above 2-D;
- avgpool2d: AveragePool with count_include_pad=1 (PyTorch counts the padding);
- flatten: Flatten(axis=1) for start_dim 1, else a Reshape to (*kept dims, -1);
- rmsnorm: x / sqrt(mean(x²) + eps) · w, written out (RMSNormalization needs opset 23);
- attention: Split of packed q|k|v (grouped heads: by sizes), then ONNX Attention (opset 23),
  which scales by 1/√D; a KV cache (kv_len) has no form yet.

An op with no entry here has no ONNX form: `emitter_for` raises InputError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from opbench.errors import InputError
from opbench.spec.model import LayerSpec

BASE_OPSET = 18  # LayerNormalization (17), ReduceMean with axes as an input (18)
_OPSET_OF = {"Gelu": 20, "Attention": 23}


class LayerScope:
    """Adds one layer's nodes and initializers to a graph, named after the layer.

    name_node(op_type, k) gives the k-th node of that op type its name (the first node of the
    layer is its principal node); tensors are named after the node that produces them.
    """

    def __init__(
        self,
        layer: str,
        name_node: Callable[[str, bool, int], str],
        prefix: str,
        nodes: list[Any],
        initializers: list[Any],
    ) -> None:
        self.layer = layer
        self._name_node = name_node
        self._prefix = prefix
        self._nodes = nodes
        self._initializers = initializers
        self._count: dict[str, int] = {}
        self.node_names: list[str] = []
        self.opset = BASE_OPSET

    def weight(self, key: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = f"{self._prefix}{self.layer}.{key}"
        self._initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: Any) -> list[str]:
        from onnx import helper

        k = self._count.get(op_type, 0)
        self._count[op_type] = k + 1
        name = self._name_node(op_type, not self.node_names, k)
        out = [f"{name}_output_{i}" for i in range(outputs)]
        self._nodes.append(helper.make_node(op_type, inputs, out, name=name, **attrs))
        self.node_names.append(name)
        self.opset = max(self.opset, _OPSET_OF.get(op_type, BASE_OPSET))
        return out

    def one(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        return self.node(op_type, inputs, **attrs)[0]


Weights = Mapping[str, np.ndarray]
Emitter = Callable[[LayerScope, str, Weights, LayerSpec], str]


def _activate(scope: LayerScope, x: str, activation: str) -> str:
    if activation == "none":
        return x
    if activation == "relu":
        return scope.one("Relu", [x])
    if activation == "gelu":
        return scope.one("Gelu", [x])
    if activation == "silu":
        gate = scope.one("Sigmoid", [x])
        return scope.one("Mul", [x, gate])
    raise InputError(f"layer {scope.layer!r}: activation {activation!r} has no ONNX form")


def _linear(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    if len(layer.input_shape) == 2:
        inputs = [x, scope.weight("weight", w["weight"])]
        if "bias" in w:
            inputs.append(scope.weight("bias", w["bias"]))
        y = scope.one("Gemm", inputs, transB=1)
    else:
        y = scope.one("MatMul", [x, scope.weight("weight_t", w["weight"].T)])
        if "bias" in w:
            y = scope.one("Add", [y, scope.weight("bias", w["bias"])])
    return _activate(scope, y, layer.params["activation"])


def _conv2d(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    p = layer.params
    inputs = [x, scope.weight("weight", w["weight"])]
    if "bias" in w:
        inputs.append(scope.weight("bias", w["bias"]))
    (ph, pw) = p["padding"]
    y = scope.one(
        "Conv",
        inputs,
        kernel_shape=list(p["kernel_size"]),
        strides=list(p["stride"]),
        pads=[ph, pw, ph, pw],
        dilations=list(p["dilation"]),
        group=p["groups"],
    )
    return _activate(scope, y, p["activation"])


def _pool_attrs(layer: LayerSpec) -> dict[str, Any]:
    p = layer.params
    stride = p["stride"] if p.get("stride") is not None else p["kernel_size"]
    (ph, pw) = p["padding"]
    return {
        "kernel_shape": list(p["kernel_size"]),
        "strides": list(stride),
        "pads": [ph, pw, ph, pw],
    }


def _maxpool(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    return scope.one("MaxPool", [x], **_pool_attrs(layer))


def _avgpool(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    return scope.one("AveragePool", [x], count_include_pad=1, **_pool_attrs(layer))


def _batchnorm(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    names = [scope.weight(k, w[k]) for k in ("weight", "bias", "running_mean", "running_var")]
    return scope.one("BatchNormalization", [x, *names], epsilon=layer.params["eps"])


def _layernorm(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    inputs = [x, scope.weight("weight", w["weight"]), scope.weight("bias", w["bias"])]
    return scope.one("LayerNormalization", inputs, axis=-1, epsilon=layer.params["eps"])


def _rmsnorm(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    squares = scope.one("Mul", [x, x])
    axes = scope.weight("axes", np.array([-1], dtype=np.int64))
    mean = scope.one("ReduceMean", [squares, axes], keepdims=1)
    eps = scope.weight("eps", np.array(layer.params["eps"], dtype=np.float32))
    root = scope.one("Sqrt", [scope.one("Add", [mean, eps])])
    return scope.one("Mul", [scope.one("Div", [x, root]), scope.weight("weight", w["weight"])])


def _softmax(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    return scope.one("Softmax", [x], axis=layer.params["dim"])


def _relu(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    return _activate(scope, x, "relu")


def _gelu(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    return _activate(scope, x, "gelu")


def _silu(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    return _activate(scope, x, "silu")  # Sigmoid comes first, so it carries the layer's name


def _permute(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    from opbench.ops.registry import get_op

    perm = get_op(layer.op).permutation(len(layer.input_shape), layer.params)  # type: ignore[attr-defined]
    return scope.one("Transpose", [x], perm=list(perm))


def _flatten(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    start = layer.params["start_dim"] % len(layer.input_shape)
    if start == 1:
        return scope.one("Flatten", [x], axis=1)
    shape = scope.weight("shape", np.array(layer.output_shape, dtype=np.int64))
    return scope.one("Reshape", [x, shape])


def _attention(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    p = layer.params
    heads = p["heads"]
    kv_heads = p["kv_heads"] or heads
    if p["separate_qkv"]:
        raise InputError(
            f"layer {scope.layer!r}: three-input attention (separate_qkv) has no ONNX form yet"
        )
    if p["kv_len"] is not None:
        raise InputError(
            f"layer {scope.layer!r}: attention over a KV cache (kv_len) has no ONNX form yet"
        )
    if p["packed_qkv"] and kv_heads != heads:
        head_dim = layer.input_shape[-1] // (heads + 2 * kv_heads)
        sizes = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        split = scope.weight("split", np.array(sizes, dtype=np.int64))
        q, k, v = scope.node("Split", [x, split], outputs=3, axis=-1)
    elif p["packed_qkv"]:
        q, k, v = scope.node("Split", [x], outputs=3, axis=-1, num_outputs=3)
    else:
        q = k = v = x
    return scope.one(
        "Attention", [q, k, v], q_num_heads=heads, kv_num_heads=kv_heads,
        is_causal=int(p["causal"]),
    )  # fmt: skip


EMITTERS: dict[str, Emitter] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "maxpool2d": _maxpool,
    "avgpool2d": _avgpool,
    "batchnorm2d": _batchnorm,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    "softmax": _softmax,
    "relu": _relu,
    "gelu": _gelu,
    "silu": _silu,
    "transpose": _permute,
    "permute": _permute,
    "flatten": _flatten,
    "attention": _attention,
}


def _one_node(onnx_op: str) -> Emitter:
    def emit(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
        return scope.one(onnx_op, [x])

    return emit


def emitter_for(layer: LayerSpec, model: str) -> Emitter:
    """The layer's ONNX emitter: this table's, else one node of the op's own `onnx_op`;
    InputError when its op has neither."""
    from opbench.ops.registry import OPS

    op = OPS.get(layer.op)
    try:
        return EMITTERS[layer.op]
    except KeyError:
        if op is not None and op.onnx_op:
            return _one_node(op.onnx_op)
        known = ", ".join(sorted({*EMITTERS, *(name for name, o in OPS.items() if o.onnx_op)}))
        raise InputError(
            f"model {model!r}, layer {layer.name!r}: op {layer.op!r} has no ONNX form "
            f"(ops with one: {known})"
        ) from None
