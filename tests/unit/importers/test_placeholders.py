"""`suite from-onnx --skip-unsupported`: a placeholder stands for an unsupported node whatever
the number of its data inputs (none: a random draw; three: a Sum), and the suite written
validates and runs (the placeholders NOT-MEASURED, the other layers measured)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.spec.load import load_suite

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

runner = CliRunner()


def _model(path: Path) -> None:
    """y = linear(relu(Sum(relu(x), sigmoid(x), RandomNormal())))."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "fc.weight")
    nodes = [
        helper.make_node("RandomNormal", [], ["r"], name="noise", shape=[2, 4], dtype=1),
        helper.make_node("Relu", ["x"], ["a"], name="relu_a"),
        helper.make_node("Sigmoid", ["x"], ["b"], name="sigmoid_b"),
        helper.make_node("Sum", ["a", "b", "r"], ["s"], name="sum3"),
        helper.make_node("Relu", ["s"], ["t"], name="relu_t"),
        helper.make_node("MatMul", ["t", "fc.weight"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_placeholders_of_zero_and_three_inputs_validate_and_run(tmp_path: Path):
    path, out = tmp_path / "odd.onnx", tmp_path / "odd.yaml"
    _model(path)
    done = runner.invoke(app, ["suite", "from-onnx", str(path), "--out", str(out),
                               "--skip-unsupported"])  # fmt: skip
    assert done.exit_code == 0, done.output
    (model,) = load_suite(out).models
    holders = {lay.params["stands_for"]: lay for lay in model.layers if lay.op == "placeholder"}
    assert set(holders) == {"RandomNormal", "Sum"}
    assert holders["Sum"].inputs == ("relu_a", "sigmoid_b", "noise")
    assert holders["RandomNormal"].inputs == ("input",)  # read for its batch only
    assert len(model.graph.pieces) == 1

    runs = tmp_path / "runs"
    done = runner.invoke(app, ["run", str(out), "--quick", "--device", "cpu", "--backend",
                               "torch", "--out", str(runs)])  # fmt: skip
    assert done.exit_code == 0, done.output
    run = json.loads(next(runs.glob("*/latest/run.json")).read_text())
    status = {r["layer"]: r["status"] for r in run["layers"]}
    assert status["fc"] == "ok" and status["relu_a"] == "ok"
    assert status["sum3"] == status["noise"] == "unsupported"


def test_an_output_no_placeholder_can_make_is_never_dropped(tmp_path: Path):
    """A tail node of an unknown domain: ONNX cannot infer its output's shape, so no
    placeholder can stand for it; the suite would be the model without its last node: not
    written, exit 2, the output named."""
    path, out = tmp_path / "tail.onnx", tmp_path / "tail.yaml"
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"),
             helper.make_node("Foo", ["h"], ["y"], name="foo", domain="my.domain")]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    done = runner.invoke(app, ["suite", "from-onnx", str(path), "--out", str(out),
                               "--skip-unsupported"])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert "model output(s) y cannot be made" in done.output and not out.exists()
