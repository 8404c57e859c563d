"""An op knows itself: a toy activation declared in one module (this one) appears in every list
other stages keep about ops (ops/kinds.py): the ops fused into a conv's or linear's epilogue,
the activations matching takes for an engine's "activation" row, and the ONNX Runtime reader's
activation names, the ONNX importer's nodes; as a conv's or linear's `activation:` its own code
computes it (torch call and formula) and writes its ONNX nodes. No other file names it."""

from __future__ import annotations

import pytest
import torch

from opbench.backends.triton_fusion import fusion_groups
from opbench.export.onnx_ops import LayerScope
from opbench.match.names import ACTIVATION, families_agree
from opbench.ops.activation import Activation
from opbench.ops.base import Example, Op
from opbench.ops.functional import activate, activate_onnx, activate_reference
from opbench.ops.kinds import activation_choices, activation_ops, epilogue_ops, onnx_imports
from opbench.ops.registry import OPS, register_op
from opbench.plugins import loading
from opbench.reference.onnxruntime_nodes import node_members
from opbench.spec.load import load_suite_text


class ToyAct(Op):
    """max(x, 0) under a name of its own; its epilogue is the kernels' relu."""

    name = "t_toyact"
    summary = "a toy activation (tests only)"
    engine_names = "toyact"
    is_activation = True
    epilogue = "relu"
    onnx_imports = (("toy.tests", "ToyAct", {}),)
    reference_written_out = True
    example = Example((5, 7), (5, 7))

    def forward(self, x, weights, layer):
        return x.clamp_min(0)


def _registered(op: Op):
    """Registers `op` for one test, then puts the registry back."""
    state = loading.snapshot()
    try:
        register_op(op, "tests")
        yield
    finally:
        loading.restore(state)


@pytest.fixture
def toy():
    yield from _registered(ToyAct())


SUITE = """\
name: s
models:
  - name: m
    batch: 2
    input: [3, 6, 6]
    fuse: true
    layers:
      - {name: conv, op: conv2d, out_channels: 4, kernel_size: 3, padding: 1}
      - {name: act, op: t_toyact}
      - {name: flat, op: flatten}
      - {name: fc, op: linear, out_features: 5}
      - {name: act2, op: t_toyact}
"""


def test_a_toy_activation_is_in_no_list_until_registered() -> None:
    assert "t_toyact" not in OPS
    assert "t_toyact" not in activation_ops() | set(epilogue_ops())


@pytest.mark.usefixtures("toy")
def test_a_toy_activation_fuses_into_the_conv_and_linear_before_it() -> None:
    assert "t_toyact" in epilogue_ops() and "relu" in activation_choices()
    model = load_suite_text(SUITE, "s.yaml").models[0]
    assert (0, 1) in fusion_groups(model) and (3, 4) in fusion_groups(model)


@pytest.mark.usefixtures("toy")
def test_matching_and_the_onnxruntime_reader_know_a_toy_activation() -> None:
    assert "t_toyact" in activation_ops()
    assert families_agree(ACTIVATION, "t_toyact")
    members, _ = node_members("ToyAct_3", "FusedConv")
    assert members == ("Conv", "ToyAct")
    assert node_members("Softplus_3", "FusedConv")[0] == ("Conv", "Activation")  # no such op


def _toy_onnx(path) -> None:
    """x → Conv → ToyAct → ToyAct → y, the ToyAct nodes in a domain of their own."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(torch.randn(4, 3, 3, 3).numpy(), "conv.weight")
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("ToyAct", ["c"], ["a"], name="act", domain="toy.tests"),
        helper.make_node("ToyAct", ["a"], ["y"], name="act2", domain="toy.tests"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 6, 6])],
        [weight],
    )
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("toy.tests", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)


@pytest.mark.usefixtures("toy")
def test_the_onnx_importer_reads_a_toy_activation_by_its_declared_node(tmp_path) -> None:
    pytest.importorskip("onnxscript")
    from opbench.importers.onnx import import_onnx

    _toy_onnx(tmp_path / "toy.onnx")
    imported = import_onnx(tmp_path / "toy.onnx")
    assert not imported.unsupported
    conv, act2 = imported.layers  # the first ToyAct is the conv's epilogue: its relu
    assert (conv.op, conv.params.get("activation")) == ("conv2d", "relu")
    assert (act2.op, act2.params) == ("t_toyact", {})


def test_every_declared_epilogue_is_a_function_of_the_kernels() -> None:
    from opbench.kernels.epilogue import ACTIVATION_CODES

    for op in OPS.values():
        if op.epilogue:
            assert op.epilogue_name({}) in ACTIVATION_CODES, op.name
    assert OPS["gelu"].epilogue_name({"approximate": "tanh"}) in ACTIVATION_CODES


class ToySquare(Activation):
    """x² as an activation of its own (its epilogue name is no kernel's: never built here)."""

    name = "t_square"
    summary = "x * x (tests only)"
    epilogue = "t_square"
    example = Example((5, 7), (5, 7))

    def activate(self, x, p):
        return torch.square(x)

    def activate_reference(self, x, p):
        return x * x

    def onnx_nodes(self, scope, x, p):
        return scope.one("Mul", [x, x])


@pytest.fixture
def square():
    yield from _registered(ToySquare())


@pytest.mark.usefixtures("square")
def test_a_linear_activation_is_computed_and_exported_by_its_op() -> None:
    assert "t_square" in activation_choices()
    x = torch.randn(3, 5, dtype=torch.float64)
    assert torch.equal(activate(x, "t_square"), torch.square(x))
    assert torch.equal(activate_reference(x, "t_square"), x * x)
    nodes: list = []
    scope = LayerScope("fc", lambda op_type, first, k: f"fc_{op_type}_{k}", "", nodes, [])
    out = activate_onnx(scope, "y", "t_square")
    assert [(n.op_type, list(n.input)) for n in nodes] == [("Mul", ["y", "y"])]
    assert out == "fc_Mul_0_output_0"


def test_gelu_reads_its_onnx_nodes_and_their_approximate_attribute() -> None:
    readings = {key: found for key, found in onnx_imports().items() if found[0][0].name == "gelu"}
    assert set(readings) == {("", "Gelu"), ("com.microsoft", "Gelu"), ("com.microsoft", "FastGelu")}
    gelu, implied = readings[("", "Gelu")][0]
    assert gelu.from_onnx(implied, {}) == {}
    assert gelu.from_onnx(implied, {"approximate": "tanh"}) == {"approximate": "tanh"}
    assert gelu.from_onnx(implied, {"approximate": "erf"}) is None
    fast, implied = readings[("com.microsoft", "FastGelu")][0]
    assert fast.from_onnx(implied, {}) == {"approximate": "tanh"}
    assert onnx_imports()[("", "Relu")][0][0].name == "relu"  # its export's node, read back
