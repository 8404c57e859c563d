"""An ONNX file that cannot be read as it is: one located line, exit 2, on every command that
reads ONNX (opbench/importers/onnx/file_checks.py), never a traceback or "no op for Conv"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402

from tests.unit.importers.onnx_files import conv_relu, save_external  # noqa: E402

runner = CliRunner()

# Every command that reads an ONNX file, with the options it needs to get that far.
COMMANDS = {
    "validate": lambda m, out: ["validate", str(m)],
    "export onnx": lambda m, out: ["export", "onnx", str(m), "--out", str(out / "x")],
    "suite from-onnx": lambda m, out: ["suite", "from-onnx", str(m), "--out", str(out / "s.yaml")],
    "run": lambda m, out: ["run", str(m), "--device", "cpu", "--quick", "--out", str(out / "r")],
    "reference onnxruntime": lambda m, out: [
        *("reference", "onnxruntime", str(m)),
        *("--out", str(out / "ref.json"), "--runs", "1"),
    ],
}


def _refused(args: list[str], *phrases: str) -> str:
    done = runner.invoke(app, args)
    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert "Traceback" not in done.output
    lines = [line for line in done.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.output
    text = " ".join(done.output.split())
    for phrase in phrases:
        assert phrase in text, done.output
    return text


def _missing(folder: Path) -> Path:
    path = save_external(conv_relu(), folder / "m.onnx", "gone.bin")
    os.remove(folder / "gone.bin")
    return path


def _short(folder: Path) -> Path:
    path = save_external(conv_relu(), folder / "m.onnx", "short.bin")
    os.truncate(folder / "short.bin", 100)
    return path


def _outside(folder: Path) -> Path:
    inner = folder / "model"
    inner.mkdir()
    save_external(conv_relu(), inner / "m.onnx", "w.bin")
    (inner / "w.bin").rename(folder / "w.bin")  # the bytes are there, beside the folder
    proto = onnx.load(str(inner / "m.onnx"), load_external_data=False)
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "../w.bin"
    onnx.save(proto, str(inner / "m.onnx"))
    return inner / "m.onnx"


EXTERNAL = {
    "missing": (_missing, "is missing: no file"),
    "too short": (_short, "is too short"),
    "outside the folder": (_outside, "points outside the model's folder"),
}


@pytest.mark.parametrize("case", EXTERNAL)
@pytest.mark.parametrize("command", COMMANDS)
def test_bad_external_data_is_one_located_line(case: str, command: str, tmp_path: Path):
    make, phrase = EXTERNAL[case]
    model = make(tmp_path)
    _refused(COMMANDS[command](model, tmp_path), f"{model}: initializer 'w': external data", phrase)


def test_an_absolute_external_location_is_refused(tmp_path: Path):
    model = save_external(conv_relu(), tmp_path / "m.onnx", "w.bin")
    proto = onnx.load(str(model), load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = str(tmp_path / "w.bin")
    onnx.save(proto, str(model))
    _refused(["validate", str(model)], "is an absolute path")


def test_good_external_data_is_read(tmp_path: Path):
    model = save_external(conv_relu(), tmp_path / "m.onnx")
    done = runner.invoke(app, ["validate", str(model)])
    assert done.exit_code == 0, done.output


def _save(model, folder: Path) -> Path:
    onnx.save(model, str(folder / "m.onnx"))
    return folder / "m.onnx"


def test_a_dangling_input_names_the_node(tmp_path: Path):
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "nowhere"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    text = _refused(["validate", str(_save(conv_relu(nodes), tmp_path))],
                    "node 'add' (Add) reads 'nowhere', which no node, initializer or graph input")  # fmt: skip
    assert "no op for" not in text


def test_a_cycle_names_its_nodes(tmp_path: Path):
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "y"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    model = _save(conv_relu(nodes), tmp_path)
    _refused(COMMANDS["run"](model, tmp_path), "the graph has a cycle:", "'add' (Add)",
             "'relu' (Relu)")  # fmt: skip


def test_nodes_out_of_order_are_sorted(tmp_path: Path):
    nodes = [
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
    ]
    done = runner.invoke(app, ["validate", str(_save(conv_relu(nodes), tmp_path))])
    assert done.exit_code == 0, done.output


def test_a_missing_opset_import_names_the_node(tmp_path: Path):
    model = _save(conv_relu(opset=None), tmp_path)
    _refused(COMMANDS["suite from-onnx"](model, tmp_path),
             "node 'conv' (Conv) is of the default ONNX domain, but the model imports no opset")  # fmt: skip


def test_an_opset_newer_than_onnx_knows_is_refused(tmp_path: Path):
    newest = onnx.defs.onnx_opset_version()
    model = _save(conv_relu(opset=99), tmp_path)
    _refused(COMMANDS["run"](model, tmp_path), "opset 99 is newer than any this importer knows",
             f"up to {newest}")  # fmt: skip
