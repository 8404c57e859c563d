"""An ONNX model wherever a suite is accepted (issue 39): `validate`, `export onnx`, `reference
onnxruntime` take MODEL.onnx; a command that cannot says which can. The model is the small graph
of tests/data/reference/make_ort_fused.py (convs, a residual add, ReLU6, a linear)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import InputError
from opbench.spec.load import load_suite

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

runner = CliRunner()
MAKER = Path(__file__).parents[1] / "data" / "reference" / "make_ort_fused.py"


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    import onnx

    spec = importlib.util.spec_from_file_location("make_ort_fused", MAKER)
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    path = tmp_path_factory.mktemp("onnx") / "block.onnx"
    onnx.save(maker.graph(), str(path))
    return path


def test_validate_takes_an_onnx_model(model: Path):
    done = runner.invoke(app, ["validate", str(model)])
    assert done.exit_code == 0, done.output
    assert "block.onnx is valid" in done.output


def test_export_onnx_takes_an_onnx_model(model: Path, tmp_path: Path):
    done = runner.invoke(app, ["export", "onnx", str(model), "--out", str(tmp_path / "x")])
    assert done.exit_code == 0, done.output
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert [m["name"] for m in manifest["models"]] == ["block"]


def test_reference_profiles_the_file_and_records_its_threads(model: Path, tmp_path: Path):
    out = tmp_path / "ref.json"
    args = ["reference", "onnxruntime", str(model), "--out", str(out), "--runs", "2"]
    done = runner.invoke(app, [*args, "--threads", "1"])
    assert done.exit_code == 0, done.output
    meta = json.loads((tmp_path / "ref.meta.json").read_text())
    assert meta["intra_op_threads"] == 1 and meta["weights"] == "the file's own"
    names = {e["name"] for e in json.loads(out.read_text()) if e.get("cat") == "Node"}
    # every node of a layer carries the model's and the layer's names (b.conv1: the path /b/conv1)
    assert any(n.startswith("/block/b.conv") for n in names), names
    # a file that fixes its batch cannot be profiled at another
    done = runner.invoke(app, [*args, "--batch", "2"])
    assert done.exit_code == 2
    assert "fixes its batch at 1" in done.output


def test_a_suite_only_command_names_the_ones_that_take_a_model(model: Path):
    with pytest.raises(InputError, match="ONNX model, not a suite: .*suite from-onnx"):
        load_suite(model)


def test_reference_of_an_imported_suite_points_to_its_file(model: Path, tmp_path: Path):
    suite = tmp_path / "block.yaml"
    done = runner.invoke(app, ["suite", "from-onnx", str(model), "--out", str(suite)])
    assert done.exit_code == 0, done.output
    out = tmp_path / "ref.json"
    done = runner.invoke(
        app, ["reference", "onnxruntime", str(suite), "--out", str(out), "--runs", "1"]
    )
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "`opbench reference onnxruntime block.onnx` profiles the file itself" in text
