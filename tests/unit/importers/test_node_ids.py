"""A node's identity is its position and its name: two ONNX nodes of one name are two layers,
each timed as itself by `opbench reference onnxruntime MODEL.onnx` (issue 51: the pool's time
went to the flatten layer, and the pool layer was missing)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.importers.onnx.load import node_ids

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

runner = CliRunner()


def test_a_shared_name_gets_the_position_of_each_later_node():
    nodes = [("conv", "Conv"), ("dup", "MaxPool"), ("dup", "Flatten"), ("", "Gemm")]
    assert node_ids(nodes) == ["conv", "dup", "dup#2", "_unnamed_Gemm_3"]


def pool_then_flatten_of_one_name(path: Path) -> Path:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "g"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], name="dup", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="dup"),
        helper.make_node("Gemm", ["f", "g"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_reference_onnxruntime_times_each_node_of_a_shared_name_as_its_own_layer(tmp_path):
    model = pool_then_flatten_of_one_name(tmp_path / "dup.onnx")
    out = tmp_path / "ref.json"
    done = runner.invoke(app, ["reference", "onnxruntime", str(model), "--out", str(out),
                               "--runs", "1"])  # fmt: skip
    assert done.exit_code == 0, done.output
    ops = {
        e["args"]["op_name"]: e["name"].removesuffix("_kernel_time")
        for e in json.loads(out.read_text())
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")
    }
    # the pool layer is the file's first 'dup', the flatten layer its second
    assert ops["MaxPool"] == "/dup/dup/MaxPool"
    assert ops["Flatten"] == "/dup/flatten/Flatten"
