"""An op knows itself: a toy activation declared in one module (this one) appears in every list
other stages keep about ops (ops/kinds.py): the ops fused into a conv's or linear's epilogue,
the activations matching takes for an engine's "activation" row, and the ONNX Runtime reader's
activation names; as a conv's or linear's `activation:` its own code computes it (torch call
and formula) and writes its ONNX nodes. No other file names it."""

from __future__ import annotations

import pytest
import torch

from opbench.backends.triton_fusion import fusion_groups
from opbench.export.onnx_ops import LayerScope, _activate
from opbench.match.names import ACTIVATION, families_agree
from opbench.ops.activation import Activation
from opbench.ops.base import Example, Op
from opbench.ops.functional import activate, activate_reference
from opbench.ops.kinds import activation_choices, activation_ops, epilogue_ops
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
    assert node_members("Tanh_3", "FusedConv")[0] == ("Conv", "Activation")  # no such op here


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
    out = _activate(scope, "y", "t_square")
    assert [(n.op_type, list(n.input)) for n in nodes] == [("Mul", ["y", "y"])]
    assert out == "fc_Mul_0_output_0"
