"""Graphs built with onnx.helper for the export tests: a residual model, a branching
(Inception-like) model, ResNet-50 at full size, and small models that break one DLPy rule.

Layers are named as `opbench export` names them: a layer's first node has the layer's name,
its other nodes `<layer>/<OpType>`. Weights are seeded random float32 (never zeros); batch
norms have positive variances. `Builder.layers` lists (layer name, node names) in walk
order, what export/cuts.py and export/model_files.py take.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


class Builder:
    def __init__(self, name: str, input_shape: tuple[int, ...], seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.layers: list[tuple[str, list[str]]] = []
        self.ops: dict[str, str] = {}  # layer -> an opbench op name, for the manifest
        self.shape: dict[str, tuple[int, ...]] = {"input": tuple(input_shape)}
        self.inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))]

    # -- plumbing -----------------------------------------------------------------------------

    def _weight(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def _random(self, name: str, shape: tuple[int, ...], scale: float = 0.1) -> str:
        return self._weight(name, self.rng.standard_normal(shape) * scale)

    def _node(self, layer: str, op: str, inputs: list[str], out_shape, **attrs) -> str:
        nodes = next((n for lay, n in self.layers if lay == layer), None)
        if nodes is None:
            nodes = []
            self.layers.append((layer, nodes))
        name = layer if not nodes else f"{layer}/{op}"
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        nodes.append(name)
        self.shape[out] = tuple(out_shape)
        return out

    # -- layers -------------------------------------------------------------------------------

    def conv(self, name, x, cout, k=1, stride=1, pad=0, bias=True, act=None, group=1) -> str:
        n, cin, h, w = self.shape[x]
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        fan_in = cin // group * k * k
        inputs = [
            x,
            self._random(f"{name}.weight", (cout, cin // group, k, k), (2.0 / fan_in) ** 0.5),
        ]
        if bias:
            inputs.append(self._random(f"{name}.bias", (cout,)))
        y = self._node(name, "Conv", inputs, (n, cout, ho, wo), kernel_shape=[k, k],
                       strides=[stride, stride], pads=[pad] * 4, group=group)  # fmt: skip
        self.ops[name] = "conv2d"
        if act == "relu":
            y = self._node(name, "Relu", [y], self.shape[y])
        return y

    def bn(self, name, x) -> str:
        c = self.shape[x][1]
        ws = [self._random(f"{name}.weight", (c,)), self._random(f"{name}.bias", (c,)),
              self._random(f"{name}.running_mean", (c,)),
              self._weight(f"{name}.running_var", self.rng.uniform(0.5, 1.5, c))]  # fmt: skip
        self.ops[name] = "batchnorm2d"
        return self._node(name, "BatchNormalization", [x, *ws], self.shape[x], epsilon=1e-5)

    def unary(self, name, x, op, opbench_op, **attrs) -> str:
        self.ops[name] = opbench_op
        return self._node(name, op, [x], self.shape[x], **attrs)

    def relu(self, name, x) -> str:
        return self.unary(name, x, "Relu", "relu")

    def relu6(self, name, x) -> str:
        low = self._weight(f"{name}.clip_min", np.array(0.0))
        high = self._weight(f"{name}.clip_max", np.array(6.0))
        self.ops[name] = "relu6"
        return self._node(name, "Clip", [x, low, high], self.shape[x])

    def add(self, name, a, b) -> str:
        self.ops[name] = "add"
        return self._node(name, "Add", [a, b], self.shape[a])

    def mul(self, name, a, b) -> str:
        self.ops[name] = "mul"
        return self._node(name, "Mul", [a, b], self.shape[a])

    def concat(self, name, xs, axis=1) -> str:
        first = list(self.shape[xs[0]])
        first[axis] = sum(self.shape[x][axis] for x in xs)
        self.ops[name] = "concat"
        return self._node(name, "Concat", list(xs), tuple(first), axis=axis)

    def pool(self, name, x, op, k, stride, pad=0) -> str:
        n, c, h, w = self.shape[x]
        ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        self.ops[name] = "maxpool2d" if op == "MaxPool" else "avgpool2d"
        return self._node(name, op, [x], (n, c, ho, wo), kernel_shape=[k, k],
                          strides=[stride, stride], pads=[pad] * 4)  # fmt: skip

    def gap(self, name, x) -> str:
        n, c, _, _ = self.shape[x]
        self.ops[name] = "avgpool2d"
        return self._node(name, "GlobalAveragePool", [x], (n, c, 1, 1))

    def flatten(self, name, x) -> str:
        n = self.shape[x][0]
        rest = int(np.prod(self.shape[x][1:]))
        self.ops[name] = "flatten"
        return self._node(name, "Flatten", [x], (n, rest), axis=1)

    def gemm(self, name, x, n_out) -> str:
        n, k = self.shape[x]
        w = self._random(f"{name}.weight", (n_out, k), (1.0 / k) ** 0.5)
        b = self._random(f"{name}.bias", (n_out,))
        self.ops[name] = "linear"
        return self._node(name, "Gemm", [x, w, b], (n, n_out), transB=1)

    def softmax(self, name, x) -> str:
        return self.unary(name, x, "Softmax", "softmax", axis=-1)

    def transpose(self, name, x, perm) -> str:
        self.ops[name] = "permute"
        return self._node(name, "Transpose", [x], tuple(self.shape[x][p] for p in perm), perm=perm)

    def model(self, outputs: list[str]) -> Any:
        outs = [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, list(self.shape[o]))
            for o in outputs
        ]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outs, self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        proto.ir_version = 8
        return proto

    def manifest_layers(self) -> list[dict[str, Any]]:
        """Layer entries as export/model_files.py takes them."""
        made = {n.name: n for n in self.nodes}
        return [
            {"name": name, "op": self.ops[name], "onnx_nodes": list(nodes),
             "onnx_ops": [made[n].op_type for n in nodes],
             "output_shape": list(self.shape[made[nodes[-1]].output[0]])}
            for name, nodes in self.layers
        ]  # fmt: skip

    def feed(self, seed: int = 1) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"input": rng.standard_normal(self.shape["input"]).astype(np.float32)}


def bottleneck(b: Builder, prefix: str, x: str, mid: int, out: int, stride: int,
               down: bool, bn: bool = True) -> str:  # fmt: skip
    """A ResNet bottleneck: 1x1, 3x3 (stride), 1x1, with a downsample path where shapes
    change, joined by an add and a ReLU. With bn=False the batch norms are folded into the
    convs, as torchvision's ONNX export gives them."""

    def conv_bn(name, y, cout, k, s, p, relu):
        y = b.conv(f"{prefix}_{name}", y, cout, k, s, p, bias=not bn)
        if bn:
            y = b.bn(f"{prefix}_{name}_bn", y)
        return b.relu(f"{prefix}_{name}_relu", y) if relu else y

    y = conv_bn("conv1", x, mid, 1, 1, 0, True)
    y = conv_bn("conv2", y, mid, 3, stride, 1, True)
    y = conv_bn("conv3", y, out, 1, 1, 0, False)
    shortcut = conv_bn("down", x, out, 1, stride, 0, False) if down else x
    return b.relu(f"{prefix}_out", b.add(f"{prefix}_add", y, shortcut))


def residual(batch: int = 2) -> Builder:
    """A small ResNet: stem, one downsample block, one identity block, head."""
    b = Builder("residual", (batch, 3, 16, 16), seed=11)
    x = b.relu("stem_relu", b.bn("stem_bn", b.conv("stem", "input", 8, 3, 1, 1, bias=False)))
    x = b.pool("pool", x, "MaxPool", 2, 2)
    x = bottleneck(b, "b1", x, 4, 16, 2, down=True)
    x = bottleneck(b, "b2", x, 4, 16, 1, down=False)
    y = b.gemm("fc", b.flatten("flat", b.gap("gap", x)), 10)
    b.out = b.softmax("probs", y)  # type: ignore[attr-defined]
    return b


def branching(batch: int = 2) -> Builder:
    """An Inception-like module: three branches of the stem concatenated on channels, a ReLU
    on the concat, a second concat of a branch with the first, then the head."""
    b = Builder("branching", (batch, 3, 12, 12), seed=12)
    stem = b.conv("stem", "input", 8, 3, 1, 1, act="relu")
    b1 = b.conv("b1", stem, 4, 1, act="relu")
    b2 = b.conv("b2_3x3", b.conv("b2_1x1", stem, 4, 1, act="relu"), 6, 3, 1, 1, act="relu")
    b3 = b.conv("b3_1x1", b.pool("b3_pool", stem, "MaxPool", 3, 1, 1), 2, 1)
    cat = b.relu("cat_relu", b.concat("cat", [b1, b2, b3]))
    cat2 = b.concat("cat2", [cat, b1])
    y = b.gemm("fc", b.flatten("flat", b.gap("gap", b.conv("mix", cat2, 8, 1))), 5)
    b.out = y  # type: ignore[attr-defined]
    return b


def resnet50(batch: int = 1) -> Builder:
    """ResNet-50 at full size (25.6 M parameters), batch norms folded into the convs as in
    torchvision's ONNX export: 53 convs, 16 adds, 49 ReLUs, a max pool, a global average
    pool, a flatten and the classifier: 122 layers."""
    b = Builder("resnet50", (batch, 3, 224, 224), seed=50)
    x = b.relu("relu", b.conv("conv1", "input", 64, 7, 2, 3))
    x = b.pool("maxpool", x, "MaxPool", 3, 2, 1)
    for stage, (blocks, mid) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)], start=1):
        for i in range(blocks):
            stride = 2 if i == 0 and stage > 1 else 1
            x = bottleneck(b, f"layer{stage}_{i}", x, mid, mid * 4, stride, down=i == 0, bn=False)
    b.out = b.gemm("fc", b.flatten("flatten", b.gap("avgpool", x)), 1000)  # type: ignore[attr-defined]
    return b


def inverted_residual(batch: int = 2) -> Builder:
    """MobileNetV2's block: 1x1 expand, ReLU6, 3x3 depthwise, ReLU6, 1x1 project, and the
    residual add of the block's input."""
    b = Builder("inverted_residual", (batch, 3, 10, 10), seed=13)
    x = b.relu6("stem_relu6", b.conv("stem", "input", 8, 3, 1, 1))
    y = b.relu6("expand_relu6", b.conv("expand", x, 24, 1))
    y = b.relu6("dw_relu6", b.conv("dw", y, 24, 3, 1, 1, group=24))
    y = b.conv("project", y, 8, 1)
    b.out = b.add("add", y, x)  # type: ignore[attr-defined]
    return b
