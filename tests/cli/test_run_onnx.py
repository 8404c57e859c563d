"""`opbench run model.onnx`: the ONNX file is the suite, run with its own weights; each
backend's whole-model output is checked against ONNX Runtime's on the same input, each layer
against float64 as usual; the import's record is kept in run.json."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
nn = torch.nn
runner = CliRunner()


class Block(nn.Module):
    """Sequence-first, as nn.MultiheadAttention is by default: [S, B, E]."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)
        self.attn = nn.MultiheadAttention(32, 2)
        self.fc = nn.Linear(32, 24)

    def forward(self, x):
        h = self.norm(x)
        return torch.relu(self.fc(self.attn(h, h, h, need_weights=False)[0] + x))


def _export(path: Path, **dynamic) -> None:
    torch.manual_seed(0)
    model = Block().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(5, 3, 32),), str(path), dynamo=True,
                          external_data=False, **dynamic)  # fmt: skip


@pytest.fixture(scope="module")
def static_export(tmp_path_factory) -> Path:
    """The block exported once for the module (static batch): each test runs a copy of it."""
    path = tmp_path_factory.mktemp("export") / "block.onnx"
    _export(path)
    return path


def _run(path: Path, out: Path, *extra: str):
    return runner.invoke(
        app, ["run", str(path), "--quick", "--device", "cpu", "--out", str(out), *extra]
    )


def test_an_onnx_file_runs_with_its_own_weights(tmp_path: Path, static_export: Path):
    path = shutil.copy(static_export, tmp_path / "block.onnx")
    done = _run(path, tmp_path / "runs", "--backend", "torch", "--backend", "triton")
    assert done.exit_code == 0, done.output
    run = json.loads((tmp_path / "runs" / "block" / "latest" / "run.json").read_text())
    layers = {r["layer"]: r for r in run["layers"]}
    assert {"attn.scaled_dot_product_attention", "fc", "norm"} <= set(layers)
    assert all(r["status"] == "ok" and not r["correctness"]["failures"] for r in run["layers"])
    eager = [e for e in run["end_to_end"] if e["mode"] == "eager"]
    assert {e["backend"] for e in eager} == {"torch", "triton"}
    for row in eager:
        assert row["correctness"]["reference"] == "onnxruntime-cpu-float32"
        assert not row["correctness"]["failures"], row["correctness"]
    record = run["origin"]["onnx_import"]
    assert record["batch_axis"] == 1 and not record["unsupported"]
    assert run["suite_source"] == str(path)


def test_a_wrong_weight_is_caught_by_the_whole_model_check(
    tmp_path: Path, monkeypatch, static_export: Path
):
    """Per-layer checks use the weights given, right or wrong; only ONNX Runtime's output of the
    file itself shows that the model computed is not the file's."""
    from opbench.importers.onnx import file_data

    path = shutil.copy(static_export, tmp_path / "block.onnx")
    real = file_data.FileData.layer_weights

    def off_by_a_little(self, layer, shapes):
        arrays = real(self, layer, shapes)
        if layer.op == "layernorm":
            arrays["bias"] = arrays["bias"] + np.float32(0.05)
        return arrays

    monkeypatch.setattr(file_data.FileData, "layer_weights", off_by_a_little)
    done = _run(path, tmp_path / "runs", "--backend", "torch")
    assert done.exit_code == 3, done.output
    assert "whole-model run(s) failed their output check: block/torch/eager" in done.output
    run = json.loads((tmp_path / "runs" / "block" / "latest" / "run.json").read_text())
    (eager,) = [e for e in run["end_to_end"] if e["mode"] == "eager"]
    assert eager["correctness"]["reference"] == "onnxruntime-cpu-float32"
    assert all(not r["correctness"]["failures"] for r in run["layers"])


def _eager_reference(out: Path) -> str:
    run = json.loads((out / "block" / "latest" / "run.json").read_text())
    (eager,) = [e for e in run["end_to_end"] if e["mode"] == "eager"]
    assert not eager["correctness"]["failures"], eager["correctness"]
    return eager["correctness"]["reference"]


def test_batch_of_a_symbolic_or_static_file(tmp_path: Path, static_export: Path):
    """A symbolic batch runs at --batch in ONNX Runtime too; a static one cannot, and the
    whole-model reference says so."""
    path = tmp_path / "block.onnx"
    _export(path, dynamic_shapes={"x": {1: torch.export.Dim("batch")}})
    done = _run(path, tmp_path / "a", "--backend", "torch", "--batch", "4")
    assert done.exit_code == 0, done.output
    assert _eager_reference(tmp_path / "a") == "onnxruntime-cpu-float32"
    run = json.loads((tmp_path / "a" / "block" / "latest" / "run.json").read_text())
    assert run["suite_spec"]["models"][0]["batch"] == 4

    shutil.copy(static_export, path)
    done = _run(path, tmp_path / "b", "--backend", "torch", "--batch", "4")
    assert done.exit_code == 0, done.output
    assert "the file's batch is fixed at 3" in _eager_reference(tmp_path / "b")


def test_batch_and_dtype_are_for_onnx_files_only(tmp_path: Path):
    suite = Path(__file__).parents[2] / "suites" / "quickstart.yaml"
    done = _run(suite, tmp_path / "runs", "--dtype", "float16")
    assert done.exit_code == 2
    assert "--batch and --dtype are for an ONNX model" in done.output
