"""Issue 27's check on ResNet-50: the imported suite, profiled with `opbench reference
onnxruntime` and compared, has no MISSING layer and no compute row of the profile left
unmatched or counted as engine overhead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import onnx_models_module
from typer.testing import CliRunner

from opbench.cli.main import app

try:
    onnx_models_module()._import_torchvision()
except ImportError:
    pytest.skip("the vision models need torchvision (the test extras)", allow_module_level=True)
pytest.importorskip("onnxruntime")

runner = CliRunner()
# Rows ONNX Runtime adds that compute nothing of the model: layout reorders, copies.
NOT_COMPUTE = {"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost", "Memcpy"}


def _ok(*args: str) -> None:
    done = runner.invoke(app, [str(a) for a in args])
    assert done.exit_code == 0, done.output


def test_resnet50_compares_with_its_onnx_runtime_profile(onnx_models, tmp_path: Path):
    suite = tmp_path / "resnet50.yaml"
    _ok("suite", "from-onnx", onnx_models["resnet50"], "--out", suite)
    _ok("reference", "onnxruntime", suite, "--out", tmp_path / "ort.json", "--runs", "3")
    _ok(
        "run", suite, "--backend", "torch", "--quick", "--device", "cpu", "--out", tmp_path / "runs"
    )
    _ok(
        "compare", tmp_path / "runs" / "resnet50" / "latest", "--reference", tmp_path / "ort.json",
        "--backend", "torch", "--allow-cpu-times", "--no-gate", "--out", tmp_path / "cmp",
    )  # fmt: skip
    comparison = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    missing = [
        row["layers"] for row in comparison["rows"]
        for t in row["timings"] if t["verdict"] == "MISSING"
    ]  # fmt: skip
    assert not missing, f"{len(missing)} MISSING, e.g. {missing[:4]}"
    assert comparison["unmatched"] == []
    assert {r["raw_type"] for r in comparison["overhead"]} <= NOT_COMPUTE
