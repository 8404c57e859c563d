"""A whole-model run that errored checked nothing: `opbench run` never exits 0 on it (issue 51:
ONNX Runtime refused an opset-99 file, the whole-model check errored, the run exited 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

runner = CliRunner()


def _conv_relu_conv(path: Path) -> Path:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_an_errored_whole_model_check_exits_non_zero(tmp_path: Path, monkeypatch):
    from opbench.pipeline.file_data import FileModelData

    def refused(self):
        raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : Load model failed")

    monkeypatch.setattr(FileModelData, "ort_reference", refused)
    model = _conv_relu_conv(tmp_path / "m.onnx")
    args = ["run", str(model), "--device", "cpu", "--quick", "-b", "torch", "--out"]
    done = runner.invoke(app, [*args, str(tmp_path / "runs")])
    assert done.exit_code == 3, done.output
    assert "whole-model run(s) errored, their output unchecked: m/torch/eager" in " ".join(
        done.output.split()
    )
