"""Ops the 38-architecture zoo of issue 52 lacked, each imported from the ONNX form a user's
export writes, run on torch with the whole output checked against ONNX Runtime, and exported
back: MaxPool with ceil_mode (SqueezeNet, GoogLeNet); HardSwish and HardSigmoid
(MobileNetV3), fused into the conv and linear before them, and Tanh; a Pad of zeros (Swin) as
the identity."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from opbench.importers.onnx import import_onnx  # noqa: E402
from tests.unit.importers.onnx_checks import imported_layers, round_trips, run_checked  # noqa: E402


def _pad_model(path: Path, pads: list[int]) -> Path:
    """x → Conv → Pad(pads) → Relu, as onnx.helper writes it (Swin's Pad: pads a constant)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Pad", ["c", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Relu", ["p"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"),
         numpy_helper.from_array(np.array(pads, dtype=np.int64), "pads")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _export(module: nn.Module, shape: tuple[int, ...], path: Path) -> Path:
    """The legacy exporter (fast); the node forms are the same as the dynamo one's here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.randn(shape),), str(path), dynamo=False)
    return path


def test_a_ceil_mode_max_pool_imports_and_runs(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(3, 2, ceil_mode=True))
    path = _export(model, (2, 3, 12, 12), tmp_path / "pool.onnx")
    pool = next(layer for layer in imported_layers(path).values() if layer.op == "maxpool2d")
    assert pool.params == {"kernel_size": [3, 3], "stride": [2, 2], "ceil_mode": True}
    assert pool.output_shape == (2, 4, 5, 5)  # floor mode: 4 x 4
    run_checked(path, tmp_path)


def test_a_ceil_mode_max_pool_round_trips(tmp_path: Path) -> None:
    params = {"kernel_size": [3, 3], "stride": [2, 2], "ceil_mode": True}
    round_trips(tmp_path, "maxpool2d", [3, 8, 11], params)


class _MobileNetV3Block(nn.Module):
    """conv → hardswish, a squeeze-excitation gate of hardsigmoid, and a tanh."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.act = nn.Hardswish()
        self.fc = nn.Linear(8, 8)
        self.gate = nn.Hardsigmoid()
        self.tanh = nn.Tanh()

    def forward(self, x):
        y = self.act(self.conv(x))
        g = self.gate(self.fc(y.mean((2, 3))))
        return self.tanh(y * g[:, :, None, None])


def test_hard_activations_fuse_into_the_layer_before_and_tanh_runs(tmp_path: Path) -> None:
    path = _export(_MobileNetV3Block(), (2, 3, 8, 8), tmp_path / "block.onnx")
    layers = imported_layers(path)
    assert layers["conv"].params["activation"] == "hardswish"
    assert layers["fc"].params["activation"] == "hardsigmoid"
    assert layers["tanh"].op == "tanh"
    run_checked(path, tmp_path, "torch", "triton")


@pytest.mark.parametrize("op", ["hardswish", "hardsigmoid", "tanh"])
def test_the_new_activations_round_trip(op: str, tmp_path: Path) -> None:
    round_trips(tmp_path, op, [5, 7], {})


def test_a_pad_of_zeros_is_the_identity_and_listed_as_absorbed(tmp_path: Path) -> None:
    path = _pad_model(tmp_path / "pad.onnx", [0] * 8)
    layers = imported_layers(path)
    assert [layer.op for layer in layers.values()] == ["conv2d", "relu"]
    assert layers["relu"].inputs == ("conv",)
    absorbed = import_onnx(path).absorbed
    assert [(a.node, a.op_type, a.why, a.into) for a in absorbed if a.node == "pad"] == [
        ("pad", "Pad", "view", "relu")
    ]
    run_checked(path, tmp_path)


def test_a_pad_that_pads_is_not_taken_for_the_identity(tmp_path: Path) -> None:
    path = _pad_model(tmp_path / "pad.onnx", [0, 0, 1, 1, 0, 0, 1, 1])
    assert [u.node for u in import_onnx(path).unsupported] == ["pad"]
