"""What the new-op tests (issue 52) do to a small ONNX file: import it, run it with `opbench run`
checked against ONNX Runtime, and export a one-layer suite and read it back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.importers.onnx import import_onnx
from tests.unit.importers.test_hf_models import _checked_against_ort, _run

runner = CliRunner()


def imported_layers(path: Path) -> dict[str, Any]:
    """The file's layers by name, asserting every node became a native layer."""
    imported = import_onnx(path, batch=None, dims={})
    assert imported.unsupported == [], [(u.node, u.reason) for u in imported.unsupported]
    assert not [layer for layer in imported.layers if layer.placeholder_for]
    return {layer.name: layer for layer in imported.layers}


def run_checked(path: Path, tmp_path: Path, *backends: str) -> dict:
    """`opbench run` of the file on the CPU: every layer ok, the whole output vs ONNX Runtime."""
    backends = backends or ("torch",)
    run = _run(path, tmp_path / "runs", *backends)
    _checked_against_ort(run, backends)
    return run


def exported_layer(tmp_path: Path, op: str, shape: list[int], params: dict) -> Path:
    """`opbench export onnx` of a suite of a sigmoid and one `op` layer (batch 2: two layers,
    so that `opbench run` checks the whole output); the .onnx file's path."""
    written = ", ".join(f"{k}: {json.dumps(v)}" for k, v in params.items())
    suite = tmp_path / "one.yaml"
    suite.write_text(
        "name: one\ndefaults: {dtype: float32}\nmodels:\n  - name: m\n    batch: 2\n"
        f"    input: {json.dumps(shape)}\n    layers:\n      - {{name: pre, op: sigmoid}}\n"
        f"      - {{name: layer, op: {op}{', ' if written else ''}{written}}}\n"
    )
    out = tmp_path / "x"
    done = runner.invoke(app, ["export", "onnx", str(suite), "--out", str(out)])
    assert done.exit_code == 0, done.output
    (entry,) = json.loads((out / "manifest.json").read_text())["models"]
    return out / entry["file"]


def round_trips(tmp_path: Path, op: str, shape: list[int], params: dict) -> None:
    """The exported layer comes back as the same op and parameters, and ONNX Runtime computes
    on the exported file what the torch build does."""
    path = exported_layer(tmp_path, op, shape, params)
    (_, layer) = imported_layers(path).values()
    assert (layer.op, dict(layer.params)) == (op, params)
    run_checked(path, tmp_path)
