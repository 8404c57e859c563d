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
- attention: Split of packed q|k|v (grouped heads: by sizes), or the three inputs of
  separate_qkv as they are, then ONNX Attention (opset 23), which scales by 1/√D; the bhsd
  layout, a key mask and a KV cache (kv_len, append) in export/onnx_transformer.py;
- embedding, rope: export/onnx_transformer.py.
- an activation (its own layer, or a conv's or linear's `activation:`): the nodes its op
  declares (`Activation.onnx_nodes`, ops/activation.py: relu6 is Clip(x, 0, 6), silu
  Sigmoid then Mul, gelu Gelu with its `approximate`);
- joins (several inputs, in `inputs:` order): add → Add, mul → Mul, matmul → MatMul,
  concat → Concat(axis); reshape → Reshape to (batch, *shape) (a -1 kept as written);
  slice → Slice(starts, ends, axes, steps); split → the Slice of piece `index`.

Several ops share an ONNX form (permute and transpose are both Transpose, reshape to (…, -1)
and flatten both Reshape, split and slice both Slice): `layer_hint` writes the layer's op and
parameters into its first node's doc_string (`opbench {"op": …, "params": …}`), so that an
importer of opbench's own files gets the same layer back.

An emitter gets its layer's input as one tensor name, or as a tuple of names for an op with
several inputs (`Op.arity != 1`, as the graph contract passes tensors to `forward`).

An op with no entry here, no `onnx_nodes` and no `onnx_op` has no ONNX form: `emitter_for`
raises InputError naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from opbench.errors import InputError
from opbench.export import onnx_transformer
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
        self.principal: Any = None  # the layer's first node
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
        made = helper.make_node(op_type, inputs, out, name=name, **attrs)
        if not self.node_names:
            self.principal = made
        self._nodes.append(made)
        self.node_names.append(name)
        self.opset = max(self.opset, _OPSET_OF.get(op_type, BASE_OPSET))
        return out

    def one(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        return self.node(op_type, inputs, **attrs)[0]


Weights = Mapping[str, np.ndarray]
Inputs = Any  # one tensor name (arity 1), else a tuple of names in `inputs:` order
Emitter = Callable[[LayerScope, Inputs, Weights, LayerSpec], str]


def _activate(scope: LayerScope, x: str, activation: str) -> str:
    """A conv's or linear's `activation:`: the ONNX nodes of the op whose epilogue it names."""
    from opbench.ops.kinds import epilogue_op

    if activation == "none":
        return x
    try:
        op = epilogue_op(activation)
    except ValueError:
        op = None
    if not getattr(op, "exports_to_onnx", False):
        raise InputError(f"layer {scope.layer!r}: activation {activation!r} has no ONNX form")
    return op.onnx_nodes(scope, x, {})


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


def _concat(scope: LayerScope, xs: tuple[str, ...], w: Weights, layer: LayerSpec) -> str:
    return scope.one("Concat", list(xs), axis=layer.params["axis"])


def _ints(scope: LayerScope, key: str, values: list[int]) -> str:
    return scope.weight(key, np.array(values, dtype=np.int64))


def _reshape(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    shape = [layer.output_shape[0], *layer.params["shape"]]
    return scope.one("Reshape", [x, _ints(scope, "shape", shape)])


def _slice(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    p = layer.params
    end = p["end"] if p.get("end") is not None else np.iinfo(np.int64).max
    inputs = [x, _ints(scope, "starts", [p.get("start", 0)]), _ints(scope, "ends", [end])]
    inputs += [_ints(scope, "axes", [p["axis"]]), _ints(scope, "steps", [p.get("step", 1)])]
    return scope.one("Slice", inputs)


def _split(scope: LayerScope, x: str, w: Weights, layer: LayerSpec) -> str:
    """The one piece the layer is, as a Slice (ONNX's Split would make every piece; the others
    would be dangling outputs nothing reads). The principal node's hint says it is a split."""
    p = layer.params
    start = sum(p["sizes"][: p["index"]])
    inputs = [
        x,
        _ints(scope, "starts", [start]),
        _ints(scope, "ends", [start + p["sizes"][p["index"]]]),
    ]
    return scope.one("Slice", [*inputs, _ints(scope, "axes", [p["axis"]])])


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


def _attention(scope: LayerScope, x: Inputs, w: Weights, layer: LayerSpec) -> str:
    p = layer.params
    heads = p["heads"]
    kv_heads = p["kv_heads"] or heads
    xs = (x,) if isinstance(x, str) else tuple(x)
    if onnx_transformer.needs_explicit_form(p):  # bhsd, a key mask, a KV cache
        return onnx_transformer.attention(scope, x, w, layer)
    if p["separate_qkv"]:  # three inputs: q, k and v from separate projections
        q, k, v = xs
        (_, seq, _), (_, keys, _) = layer.input_shapes[0], layer.input_shapes[1]
        if p["causal"] and keys != seq:
            raise InputError(
                f"layer {scope.layer!r}: causal attention over more keys than queries has no "
                "ONNX form (ONNX Attention's is_causal aligns the queries with the first keys)"
            )
    elif p["packed_qkv"] and kv_heads != heads:
        head_dim = layer.input_shape[-1] // (heads + 2 * kv_heads)
        sizes = [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
        split = scope.weight("split", np.array(sizes, dtype=np.int64))
        q, k, v = scope.node("Split", [xs[0], split], outputs=3, axis=-1)
    elif p["packed_qkv"]:
        q, k, v = scope.node("Split", [xs[0]], outputs=3, axis=-1, num_outputs=3)
    else:
        q = k = v = xs[0]
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
    "transpose": _permute,
    "permute": _permute,
    "flatten": _flatten,
    "attention": _attention,
    "concat": _concat,
    "reshape": _reshape,
    "slice": _slice,
    "split": _split,
    "embedding": onnx_transformer.embedding,
    "rope": onnx_transformer.rope,
}


def _activation(op: Any) -> Emitter:
    """An activation op's own ONNX nodes (`Activation.onnx_nodes`, ops/activation.py)."""

    def emit(scope: LayerScope, x: Inputs, w: Weights, layer: LayerSpec) -> str:
        return op.onnx_nodes(scope, x, layer.params)

    return emit


def _one_node(onnx_op: str) -> Emitter:
    """One node of the op's own `onnx_op`, reading every input in order (add → Add(a, b))."""

    def emit(scope: LayerScope, x: Inputs, w: Weights, layer: LayerSpec) -> str:
        return scope.one(onnx_op, [x] if isinstance(x, str) else list(x))

    return emit


HINT = "opbench "


def layer_hint(layer: LayerSpec) -> str:
    """The doc_string of a layer's first node: its op and parameters, as JSON."""
    import json

    params = {k: list(v) if isinstance(v, tuple) else v for k, v in layer.params.items()}
    return HINT + json.dumps({"op": layer.op, "params": params}, sort_keys=True)


def emitter_for(layer: LayerSpec, model: str) -> Emitter:
    """The layer's ONNX emitter: this table's, else one node of the op's own `onnx_op`;
    InputError when its op has neither."""
    from opbench.ops.registry import OPS

    op = OPS.get(layer.op)
    try:
        return EMITTERS[layer.op]
    except KeyError:
        if getattr(op, "exports_to_onnx", False):
            return _activation(op)
        if op is not None and op.onnx_op:
            return _one_node(op.onnx_op)
        own = (name for name, o in OPS.items() if o.onnx_op or getattr(o, "exports_to_onnx", 0))
        known = ", ".join(sorted({*EMITTERS, *own}))
        raise InputError(
            f"model {model!r}, layer {layer.name!r}: op {layer.op!r} has no ONNX form "
            f"(ops with one: {known})"
        ) from None
