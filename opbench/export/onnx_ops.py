"""The exporter's side of each layer's ONNX form: the `LayerScope` an op adds its nodes and
initializers through, the opset they need, the hint on a layer's first node, and
`exporting_op`, which asks the layer's op for its form.

The form itself is the op's (`Op.to_onnx`, in the op's own module: ops/linear.py's Gemm or
MatMul, ops/attention_onnx.py's Attention, an activation's `onnx_nodes`, ...; by default one
node of the op's `onnx_op` reading every input, add → Add(a, b)): adding an op's export form
touches its module alone. The forms are the plain ONNX operators engines import (DLPy's
importer knows Conv, BatchNormalization, Gemm, MatMul, Add, pools, Relu, Flatten, Softmax),
and compute exactly what the op's torch `forward` computes. An op gets its layer's input as
one tensor name, or as a tuple of names for an op with several inputs (`Op.arity != 1`, as
the graph contract passes tensors to `forward`), its weights as numpy float32.

Several ops share an ONNX form (permute and transpose are both Transpose, reshape to (…, -1)
and flatten both Reshape, split and slice both Slice): `layer_hint` writes the layer's op and
parameters into its first node's doc_string (`opbench {"op": …, "params": …}`), so that an
importer of opbench's own files gets the same layer back.

An op with neither `onnx_op` nor a `to_onnx` of its own has no ONNX form: `exporting_op`
raises InputError naming it and the ops that have one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opbench.errors import InputError
from opbench.ops.base import Op
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

    def ints(self, key: str, values: Any) -> str:
        """An int64 initializer (shapes, axes, indices: what Reshape, Slice, Split read)."""
        return self.weight(key, np.array(values, dtype=np.int64))


HINT = "opbench "


def layer_hint(layer: LayerSpec) -> str:
    """The doc_string of a layer's first node: its op and parameters, as JSON."""
    import json

    params = {k: list(v) if isinstance(v, tuple) else v for k, v in layer.params.items()}
    return HINT + json.dumps({"op": layer.op, "params": params}, sort_keys=True)


def exporting_op(layer: LayerSpec, model: str) -> Op:
    """The layer's op, which writes its ONNX form (`Op.to_onnx`); InputError when it has none."""
    from opbench.ops.registry import OPS

    op = OPS.get(layer.op)
    if op is None or not op.exports_to_onnx:
        known = ", ".join(sorted(name for name, o in OPS.items() if o.exports_to_onnx))
        raise InputError(
            f"model {model!r}, layer {layer.name!r}: op {layer.op!r} has no ONNX form "
            f"(ops with one: {known})"
        )
    return op
