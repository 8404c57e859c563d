"""Ops read their own ONNX nodes (`Op.onnx_imports`, `Op.read_onnx`): an op declared in this
module, with a weight and an attribute, is imported from its node with no importer table
touched; and an op's refusal reaches the user as the importer's one-line reason."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.ops.base import Example, Op, Param
from opbench.ops.onnx_reading import ROWS, OnnxReading, Refused
from opbench.ops.registry import register_op
from opbench.plugins import loading

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from opbench.importers.onnx import import_onnx  # noqa: E402


class ToyScale(Op):
    """y = alpha · x · weight over the last dim: a weight (input 1) and an attribute."""

    name = "t_toyscale"
    summary = "alpha · x · weight (tests only)"
    example = Example((5, 7), (5, 7), {"alpha": 0.5})
    params = (Param("alpha", "float", 1.0),)
    onnx_imports = (("toy.tests", "ToyScale", {}),)

    def read_onnx(self, node, implied):
        if node.constant(1) is None:
            raise Refused("the scale is not a constant")
        return OnnxReading({"alpha": node.attr("alpha", 1.0)}, ROWS, {"weight": (1, "asis")})

    def weight_shapes(self, in_shape, p):
        return {"weight": (in_shape[-1],)}

    def forward(self, x, weights, layer):
        return layer.params["alpha"] * x * weights["weight"]


@pytest.fixture
def toy():
    state = loading.snapshot()
    try:
        register_op(ToyScale(), "tests")
        yield
    finally:
        loading.restore(state)


def _model(path, node, initializers, opsets=(("", 18),)) -> None:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(*o) for o in opsets])
    onnx.save(model, path)


@pytest.mark.usefixtures("toy")
def test_an_op_of_a_test_module_is_read_from_its_own_node(tmp_path) -> None:
    scale = np.random.default_rng().standard_normal(6).astype(np.float32)
    node = helper.make_node(
        "ToyScale", ["x", "scale"], ["y"], name="toy", domain="toy.tests", alpha=0.25
    )
    _model(tmp_path / "toy.onnx", node, {"scale": scale}, (("", 18), ("toy.tests", 1)))
    imported = import_onnx(tmp_path / "toy.onnx")
    assert not imported.unsupported
    (layer,) = imported.layers
    assert (layer.op, layer.params, layer.weights) == (
        "t_toyscale",
        {"alpha": 0.25},
        {"weight": ("scale", "asis")},
    )
    assert layer.output_shape == (2, 3, 6, 6)


def test_a_conv_with_asymmetric_pads_is_refused_with_the_ops_reason(tmp_path) -> None:
    weight = np.random.default_rng().standard_normal((4, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 0, 0])
    _model(tmp_path / "conv.onnx", node, {"w": weight})
    imported = import_onnx(tmp_path / "conv.onnx")
    [(node_name, reason)] = [(u.node, u.reason) for u in imported.unsupported]
    assert (node_name, reason) == ("conv", "pads [1, 1, 0, 0] are not symmetric")
