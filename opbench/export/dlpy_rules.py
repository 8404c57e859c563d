"""What DLPy's ONNX import keeps of a model: its rules, checked before anyone reaches SAS.

DLPy 1.3 (`dlpy/model_conversion/sas_onnx_parse.py`, `onnx_to_sas`) turns an ONNX graph into
SAS deep-learning layers: compute nodes (Conv, pools, BatchNormalization, Concat, Gemm,
MatMul, and an Add/Sum of two computed tensors) become layers, linked to the compute layers
found by walking back through everything else; activations become the `act` of the layer
before them; Reshape, Flatten and Dropout are passed over. What it refuses raises; what it
does not understand it often changes or drops with a printed warning. `problems(proto)`
finds both kinds, so a cut that would not time what it claims is never sent; each problem
names its node. `stand_ins(proto)` lists the two substitutions the SAS side makes (docs/sas.md):
Clip with min 0 (ReLU6) timed as Relu, Sigmoid imported as DLPy's LOGISTIC activation.

The rules mirror DLPy's code; tests/unit/export/test_dlpy_rules.py runs DLPy's own importer on
every cut these rules accept and checks that each node became what it should.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# sas_onnx_parse._onnx_ops and _act_map (sas-dlpy 1.3).
STRUCTURE_OPS = frozenset(
    "Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Concat Gemm MatMul Add Sum "
    "Reshape Dropout Flatten Constant".split()
)
ACTIVATIONS = frozenset("Relu Tanh LeakyRelu Log Softmax Identity Cos Sin Exp Elu Softplus".split())
DLPY_OPS = STRUCTURE_OPS | ACTIVATIONS
# sas_onnx_parse.is_compute_layer, and the DLPy layers among them whose config has `act`.
_COMPUTE = frozenset(
    "Conv MaxPool AveragePool GlobalAveragePool BatchNormalization Concat Gemm MatMul".split()
)
_TAKES_ACT = frozenset("Conv BatchNormalization Concat Gemm MatMul Add Sum".split())
_PASSED_OVER = frozenset({"Reshape", "Flatten", "Dropout", "Identity"})

LAYER_API = (
    "to time what DLPy's ONNX import refuses, build the model with DLPy's layer API "
    "(dlpy.layers: LayerNormalization, MultiHeadAttention, Scale, …) and time it by hand"
)


@dataclass(frozen=True)
class Problem:
    """A node DLPy refuses, or would change or drop."""

    node: str
    op: str
    why: str
    remedy: str = LAYER_API


@dataclass(frozen=True)
class StandIn:
    """A node replaced on the SAS side: its op becomes `op`, its inputs the first `inputs`."""

    node: str
    was: str
    op: str
    inputs: int
    note: str

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "was": self.was,
            "op": self.op,
            "inputs": self.inputs,
            "note": self.note,
        }


def _constants(graph: Any) -> dict[str, Any]:
    """Initializers and Constant outputs, as numpy arrays."""
    from onnx import numpy_helper

    values = {}
    for tensor in graph.initializer:
        values[tensor.name] = tensor
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = attr.t
    return {name: _array(numpy_helper, t) for name, t in values.items()}


def _array(numpy_helper: Any, tensor: Any) -> Any:
    from onnx import TensorProto

    if tensor.data_location == TensorProto.EXTERNAL:
        return None  # a weight in the shared file: only its presence matters here
    return numpy_helper.to_array(tensor)


def stand_ins(proto: Any) -> list[StandIn]:
    """The substitutions the SAS side makes for this model."""
    graph = proto.graph
    constants = _constants(graph)
    found = []
    for node in graph.node:
        if node.op_type == "Sigmoid":
            found.append(
                StandIn(node.name, "Sigmoid", "Log", 1,
                        "Sigmoid imported as DLPy's LOGISTIC activation (DLPy maps ONNX 'Log' to it)")
            )  # fmt: skip
        elif node.op_type == "Clip":
            low, high = _clip_bounds(node, constants)
            if low == 0.0:
                what = "ReLU6" if high == 6.0 else f"Clip(0, {high})"
                found.append(
                    StandIn(node.name, "Clip", "Relu", 1,
                            f"{what} timed as ReLU: DLPy's ONNX import has no Clip")
                )  # fmt: skip
    return found


def _clip_bounds(node: Any, constants: dict[str, Any]) -> tuple[float | None, float | None]:
    bounds: list[float | None] = [None, None]
    for attr in node.attribute:  # opset < 11
        if attr.name == "min":
            bounds[0] = attr.f
        if attr.name == "max":
            bounds[1] = attr.f
    for i, name in enumerate(node.input[1:3]):
        value = constants.get(name) if name else None
        if value is not None and value.size == 1:
            bounds[i] = float(value.reshape(()))
    return bounds[0], bounds[1]


def apply_stand_ins(proto: Any, subs: Iterable[StandIn]) -> Any:
    """A copy of `proto` with the substitutions made (the SAS script does the same)."""
    import copy

    out = copy.deepcopy(proto)
    by_node = {s.node: s for s in subs}
    for node in out.graph.node:
        sub = by_node.get(node.name)
        if sub is not None:
            node.op_type = sub.op
            del node.input[sub.inputs :]
            del node.attribute[:]
    return out


class _Graph:
    """What the rules need to know about one graph."""

    def __init__(self, proto: Any, shapes: dict[str, Any]) -> None:
        graph = proto.graph
        self.nodes = list(graph.node)
        self.weights = {t.name for t in graph.initializer} | {
            n.output[0] for n in self.nodes if n.op_type == "Constant"
        }
        self.data_inputs = [v for v in graph.input if v.name not in self.weights]
        self.maker = {out: n for n in self.nodes for out in n.output}
        self.readers: dict[str, list[Any]] = {}
        for n in self.nodes:
            for t in n.input:
                self.readers.setdefault(t, []).append(n)
        self.outputs = {v.name for v in graph.output}
        self.shapes = shapes

    def rank(self, tensor: str) -> int | None:
        info = self.shapes.get(tensor)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        return len(info.type.tensor_type.shape.dim)

    def dims(self, tensor: str) -> tuple[int, ...] | None:
        info = self.shapes.get(tensor)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        return tuple(d.dim_value for d in info.type.tensor_type.shape.dim)

    def is_bias(self, node: Any) -> bool:
        """DLPy's is_bias_op: an Add/Sum with a constant operand (direct, or a Reshape of
        constants)."""
        if node.op_type not in ("Add", "Sum"):
            return False
        for t in node.input:
            if t in self.weights:
                return True
            maker = self.maker.get(t)
            if (
                maker is not None
                and maker.op_type == "Reshape"
                and all(i in self.weights for i in maker.input)
            ):
                return True
        return False

    def is_compute(self, node: Any) -> bool:
        if node.op_type in ("Add", "Sum"):
            return not self.is_bias(node)
        return node.op_type in _COMPUTE

    def sources(self, tensor: str) -> list[Any | None]:
        """The compute nodes a tensor comes from, walking back over everything else, as DLPy
        does; None stands for the model input (which DLPy does not link as a source)."""
        if tensor in self.weights or not tensor:
            return []
        maker = self.maker.get(tensor)
        if maker is None:
            return [None]
        if self.is_compute(maker):
            return [maker]
        found: list[Any | None] = []
        for t in maker.input:
            found.extend(self.sources(t))
        return found

    def data_operands(self, node: Any) -> list[str]:
        return [t for t in node.input if t and t not in self.weights]


def problems(proto: Any, shapes: dict[str, Any] | None = None) -> list[Problem]:
    """Every reason DLPy 1.3 would refuse, change or drop a node of this model (as the SAS
    side sees it: after `apply_stand_ins`). An empty list: DLPy imports it faithfully."""
    if shapes is None:
        from opbench.export.cuts import value_shapes

        shapes = value_shapes(proto)
    g = _Graph(proto, shapes)
    found: list[Problem] = []

    def bad(node: Any, why: str, remedy: str = LAYER_API) -> None:
        found.append(Problem(node.name, node.op_type, why, remedy))

    unsupported = [n for n in g.nodes if n.op_type not in DLPY_OPS]
    for node in unsupported:
        bad(node, f"DLPy's ONNX import has no {node.op_type} (it raises 'Unsupported op')")
    if len(g.data_inputs) != 1:
        names = ", ".join(v.name for v in g.data_inputs) or "none"
        found.append(
            Problem("", "", f"DLPy imports models with one data input; this one has {names}",
                    "time each input's piece of the model as a model of its own")
        )  # fmt: skip
    elif g.rank(g.data_inputs[0].name) not in (3, 4):
        found.append(
            Problem("", "", "DLPy needs an image input, (N, C, H, W) or (N, H, W); this one has "
                    f"shape {list(g.dims(g.data_inputs[0].name) or ())}", LAYER_API)
        )  # fmt: skip
    if unsupported:
        return found  # DLPy stops at the op check: the rules below would only add noise
    acted: dict[str, str] = {}
    computes = [n for n in g.nodes if g.is_compute(n)]
    for node in g.nodes:
        op = node.op_type
        operands = g.data_operands(node)
        if op in ("Add", "Sum", "Concat") and g.is_compute(node):
            froms = [g.sources(t) for t in operands]
            if any(None in s for s in froms):
                bad(node, f"the model input is an operand of this {op}: DLPy links layers "
                    "to layers only and would drop it")  # fmt: skip
            if op in ("Add", "Sum"):
                shapes_in = {g.dims(t) for t in operands}
                if len(shapes_in) > 1:
                    listed = " and ".join(str(list(s or ())) for s in shapes_in)
                    bad(node, f"a residual layer sums equal shapes; these are {listed}")
            else:
                axis = next((a.i for a in node.attribute if a.name == "axis"), None)
                rank = g.rank(node.output[0])
                if axis is None or axis % (rank or 4) != 1:
                    bad(node, f"DLPy concatenates on channels (axis 1) and ignores axis={axis}")
        elif op in ("Add", "Sum"):  # a bias: DLPy folds it into the conv/dense before it only
            makers = [g.maker.get(t) for t in operands]
            if not all(m is not None and m.op_type in ("Conv", "Gemm", "MatMul") for m in makers):
                bad(node, "DLPy keeps a constant Add only as the bias of the Conv, Gemm or "
                    "MatMul right before it; here it would be dropped")  # fmt: skip
        elif op in ("Gemm", "MatMul"):
            b = node.input[1] if len(node.input) > 1 else ""
            a = node.input[0]
            if b not in g.weights or a in g.weights:
                bad(node, f"a {op} of two computed tensors: DLPy only makes Dense layers (x times "
                    "a weight)")  # fmt: skip
            elif g.rank(a) not in (None, 2):
                bad(node, f"a {op} on a rank-{g.rank(a)} tensor: SAS's Dense layer flattens its "
                    "input and would multiply every feature of a sample, not each row")  # fmt: skip
        elif op == "Conv":
            attrs = {a.name: list(a.ints) for a in node.attribute if a.ints}
            if any(d != 1 for d in attrs.get("dilations", [])):
                bad(node, "DLPy ignores a Conv's dilations")
            _pads(node, attrs, bad)
            if len(attrs.get("kernel_shape", [0, 0])) != 2:
                bad(node, "DLPy imports 2-D convolutions only")
        elif op in ("MaxPool", "AveragePool"):
            attrs = {a.name: list(a.ints) for a in node.attribute if a.ints}
            _pads(node, attrs, bad)
            if any(a.name == "ceil_mode" and a.i for a in node.attribute):
                bad(node, "DLPy ignores ceil_mode")
        elif op == "GlobalAveragePool" and node.input[0] in {v.name for v in g.data_inputs}:
            bad(node, "DLPy reads a global pool's input shape from the graph's inferred shapes, "
                "which do not cover the model input")  # fmt: skip
        elif op in ACTIVATIONS and op not in ("Softmax", "Identity"):
            froms = [s for t in operands for s in g.sources(t)]
            if len(froms) != 1 or froms[0] is None:
                bad(node, "DLPy puts an activation onto the one layer before it; here there is "
                    "none (it would drop it)")  # fmt: skip
            elif froms[0].op_type not in _TAKES_ACT:
                bad(node, f"a {froms[0].op_type} layer takes no activation in SAS: DLPy would "
                    "drop it")  # fmt: skip
            elif froms[0].name in acted:
                bad(node, f"a second activation on {froms[0].name!r} (after "
                    f"{acted[froms[0].name]!r}): DLPy keeps only the last")  # fmt: skip
            else:
                acted[froms[0].name] = node.name
        elif op == "Softmax":
            if not _softmax_output(g, node):
                bad(node, "DLPy imports a Softmax only as the activation of the output layer "
                    "after a Gemm/MatMul, at the end of the model")  # fmt: skip
        if op not in ("Gemm", "MatMul", *_PASSED_OVER, *ACTIVATIONS):
            reshaped = [t for t in operands if _through_reshape(g, t)]
            if reshaped:
                bad(node, f"it reads a Reshape/Flatten ({', '.join(reshaped)}), which DLPy "
                    "passes over: it would get the tensor before the reshape (only a Dense "
                    "layer flattens its input)")  # fmt: skip
    if computes and g.outputs:
        last = computes[-1]
        out = next(iter(g.outputs))
        if last not in g.sources(out):
            found.append(
                Problem(last.name, last.op_type, "DLPy attaches the output layer to the last "
                        f"layer it builds ({last.name!r}), which is not the model's output")
            )  # fmt: skip
    return found


def _pads(node: Any, attrs: dict[str, list[int]], bad: Any) -> None:
    pads = attrs.get("pads")
    if pads and len(pads) == 4 and (pads[0] != pads[2] or pads[1] != pads[3]):
        bad(node, f"DLPy makes unequal pads {pads} equal")


def _softmax_output(g: _Graph, node: Any) -> bool:
    """A Softmax DLPy keeps: it ends the model, right after a Gemm/MatMul (and its bias)."""
    if node.output[0] not in g.outputs:
        return False
    maker = g.maker.get(node.input[0])
    if maker is not None and g.is_bias(maker):
        maker = next((g.maker.get(t) for t in maker.input if g.maker.get(t) is not None), None)
    return maker is not None and maker.op_type in ("Gemm", "MatMul")


def softmax_output(proto: Any) -> bool:
    """Whether the model ends in a Softmax DLPy makes the output layer's activation (the SAS
    script then lets DLPy build that output layer instead of an identity one)."""
    graph = proto.graph
    outputs = {v.name for v in graph.output}
    return any(n.op_type == "Softmax" and n.output[0] in outputs for n in graph.node)


def _through_reshape(g: _Graph, tensor: str) -> bool:
    """Whether a tensor is the output of a Reshape or Flatten (through other pass-overs)."""
    maker = g.maker.get(tensor)
    if maker is None:
        return False
    if maker.op_type in ("Reshape", "Flatten"):
        return True
    return maker.op_type in _PASSED_OVER and any(_through_reshape(g, t) for t in maker.input)
