"""An op's ONNX export form is its own (`Op.to_onnx`, in its module): a plugin-style op declared
here, with a weight and a parameter, exports through its own `to_onnx` with nothing else
touched, and ONNX Runtime computes what its torch `forward` does; an op with neither an
`onnx_op` nor a `to_onnx` is refused with one line naming it and the ops that have a form."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import InputError
from opbench.ops.base import Example, Op, Param
from opbench.ops.registry import register_op
from opbench.plugins import loading

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
runner = CliRunner()


class ToyScaledLeak(Op):
    """leaky_relu(x · w, alpha): a weight w over the last dim and a parameter alpha."""

    name = "t_scaled_leak"
    summary = "leaky_relu(x * w, alpha) (tests only)"
    params = (Param("alpha", "pos_float", 0.1),)
    example = Example((5, 7), (5, 7))

    def weight_shapes(self, in_shape, p):
        return {"weight": (in_shape[-1],)}

    def forward(self, x, weights, layer):
        import torch.nn.functional as F

        return F.leaky_relu(x * weights["weight"], layer.params["alpha"])

    def to_onnx(self, scope, x, weights, layer):
        scaled = scope.one("Mul", [x, scope.weight("weight", weights["weight"])])
        return scope.one("LeakyRelu", [scaled], alpha=layer.params["alpha"])


class ToyNoForm(Op):
    """An op with a torch forward and no ONNX form."""

    name = "t_no_form"
    summary = "x (tests only)"
    example = Example((5, 7), (5, 7))

    def forward(self, x, weights, layer):
        return x


@pytest.fixture
def toys():
    state = loading.snapshot()
    try:
        register_op(ToyScaledLeak(), "tests")
        register_op(ToyNoForm(), "tests")
        yield
    finally:
        loading.restore(state)


def _suite(tmp_path: Path, op: str) -> Path:
    path = tmp_path / "toy.yaml"
    path.write_text(
        "name: toy\ndefaults: {dtype: float32}\nmodels:\n  - name: m\n    batch: 2\n"
        "    input: [5, 7]\n    layers:\n      - {name: fc, op: linear, out_features: 6}\n"
        f"      - {{name: toy, op: {op}, alpha: 0.25}}\n"
    )
    return path


@pytest.mark.usefixtures("toys")
def test_a_plugin_op_exports_through_its_own_to_onnx(tmp_path: Path) -> None:
    import torch

    from opbench.ops.registry import get_op
    from opbench.pipeline.data import ModelData
    from opbench.spec.load import load_suite

    path = _suite(tmp_path, "t_scaled_leak")
    out = tmp_path / "out"
    done = runner.invoke(app, ["export", "onnx", str(path), "--out", str(out)])
    assert done.exit_code == 0, done.output
    (entry,) = json.loads((out / "manifest.json").read_text())["models"]
    proto = onnx.load(str(out / entry["file"]))
    toy = [n for n in proto.graph.node if n.name.startswith("toy")]
    assert [(n.name, n.op_type) for n in toy] == [("toy", "Mul"), ("toy/LeakyRelu", "LeakyRelu")]
    assert onnx.helper.get_attribute_value(toy[1].attribute[0]) == pytest.approx(0.25)
    assert "t_scaled_leak" in toy[0].doc_string  # the layer hint: an importer gets it back

    suite = load_suite(path)
    fc, layer = suite.models[0].layers
    data = ModelData(suite, suite.models[0], "cpu")
    x = data.inputs(0)[0].to(torch.float64)
    with torch.no_grad():
        y = get_op("linear").forward(x, _f64(data.weights(0)), fc)
        want = ToyScaledLeak().forward(y, _f64(data.weights(1)), layer).numpy()
    feeds = {i["name"]: np.load(out / i["file"]) for i in entry["inputs"]}
    (got,) = ort.InferenceSession(str(out / entry["file"])).run(None, feeds)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5


def _f64(weights):
    import torch

    return {k: v.to(torch.float64) for k, v in weights.items()}


@pytest.mark.usefixtures("toys")
def test_an_op_without_onnx_op_or_to_onnx_is_refused_by_name(tmp_path: Path) -> None:
    from opbench.export.onnx_ops import exporting_op
    from opbench.spec.load import load_suite

    path = _suite(tmp_path, "t_no_form")
    path.write_text(path.read_text().replace(", alpha: 0.25", ""))
    out = tmp_path / "out"
    done = runner.invoke(app, ["export", "onnx", str(path), "--out", str(out)])
    assert done.exit_code == 2
    assert "layer 'toy': op 't_no_form' has no ONNX form" in done.output
    assert not out.exists()  # checked before anything is written
    with pytest.raises(InputError, match=r"\(ops with one: (.*)\)") as refused:
        exporting_op(load_suite(path).models[0].layers[1], "m")
    known = str(refused.value).split("ops with one: ")[1].rstrip(")").split(", ")
    assert {"linear", "attention", "relu", "add", "t_scaled_leak"} <= set(known)
    assert "t_no_form" not in known and "placeholder" not in known
