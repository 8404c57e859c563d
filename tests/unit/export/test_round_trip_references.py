"""The whole loop on real exports (issue 39): an ONNX model with ResNet-50's and MobileNetV2's
block structure (tests/data/onnx_models.py: `resnet_blocks`, `mobilenet_v2_blocks`), run as it
is, then compared with both references made from the same file, with no --map:

- SAS: `export sas MODEL.onnx` → the generated script, with the real swat and DLPy, against the
  CAS stand-in → `compare` reads its CSV: every layer matched by its own name, no row left over;
- ONNX Runtime: `reference onnxruntime MODEL.onnx` (the file itself, its weights) → `compare`:
  every layer matched, every fused row (Conv+Relu, Conv+Add+Relu, Conv+Clip) grouped with the
  layers it covers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

runner = CliRunner()
MODELS = ("resnet_blocks", "mobilenet_v2_blocks")


def invoke(*args: str) -> str:
    done = runner.invoke(app, list(args))
    assert done.exit_code == 0, done.output
    return done.output


def compared(run_dir: Path, reference: Path) -> dict:
    """compare RUN --reference FILE (no map) → comparison.json."""
    invoke("compare", str(run_dir), "--reference", str(reference), "--backend", "torch",
           "--no-gate")  # fmt: skip
    return json.loads((run_dir / "comparison.json").read_text())


def all_matched(data: dict) -> None:
    (model,) = data["models"]
    verdicts = [t["verdict"] for r in data["rows"] for t in r["timings"]]
    assert "MISSING" not in verdicts and model["missing"] == []
    assert data["unmatched"] == []
    assert data["how_matched"]


@pytest.fixture(scope="module")
def runs(onnx_models, tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each model file and the folder of its torch run (CPU, quick)."""
    out = tmp_path_factory.mktemp("runs")
    done = {}
    for name in MODELS:
        path = onnx_models[name]
        with warnings.catch_warnings():  # the file's read-only tensors are copied for torch
            warnings.filterwarnings("error", message=".*not writable.*")
            invoke("run", str(path), "--backend", "torch", "--device", "cpu", "--quick",
                   "--out", str(out))  # fmt: skip
        (run_dir,) = [p for p in (out / name).iterdir() if p.is_dir() and not p.is_symlink()]
        done[name] = (path, run_dir)
    return done


@pytest.mark.parametrize("name", MODELS)
def test_onnxruntime_profile_of_the_file_matches_every_layer(runs, name, tmp_path: Path):
    path, run_dir = runs[name]
    profile = tmp_path / "ort.json"
    invoke("reference", "onnxruntime", str(path), "--out", str(profile), "--runs", "3")
    meta = json.loads((tmp_path / "ort.meta.json").read_text())
    assert meta["weights"] == "the file's own" and meta["batch"] == {name: 1}
    assert isinstance(meta["intra_op_threads"], int)
    data = compared(run_dir, profile)
    all_matched(data)
    grouped = [r for r in data["rows"] if len(r["layers"]) > 1]
    assert grouped, "ORT fuses the activations: some rows cover several layers"
    for row in data["rows"]:
        assert row["ambiguity"] is None, row
        # a fused row is one reference row covering all of its layers
        assert len(row["reference_rows"]) == 1 or len(row["layers"]) == 1, row
    if name == "resnet_blocks":  # conv3 + residual add + relu, one NCHWc or fused conv
        assert any({"add", "relu"} <= set(r["ops"]) for r in grouped)


@pytest.mark.parametrize("name", MODELS)
def test_sas_script_of_the_file_matches_every_layer(runs, name, tmp_path: Path):
    pytest.importorskip("swat")
    pytest.importorskip("dlpy")
    pytest.importorskip("h5py")
    from tests.unit.export.cas_standin import StandIn, client_env, serve

    path, run_dir = runs[name]
    out = tmp_path / "sas"
    invoke("export", "sas", str(path), "--out", str(out))

    def score_ms(model: str, call: int) -> float:  # cut k: 0.5 + 0.1 k ms, a little spread
        tail = model.rsplit("_", 1)[-1]
        return 0.5 + (0.0 if tail.startswith("in") else 0.1 * float(tail)) + 0.01 * (call % 3)

    server, port = serve(StandIn(score_ms))
    env = client_env(tmp_path / "home", port)
    try:
        done = subprocess.run(
            [sys.executable, str(out / "time_sas_prefixes.py"), "--username", "tester",
             "--warmup", "0", "--repeats", "2"],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = compared(run_dir, out / f"sas_prefix_{name}.csv")
    all_matched(data)
    assert data["how_matched"] == "only model"


def test_the_run_header_says_what_the_whole_model_is_checked_against():
    from types import SimpleNamespace

    from opbench.cli.run import whole_model_check

    fixed = SimpleNamespace(static_batch=True, file_batch=1, batch=1)
    assert whole_model_check(fixed, None) == "ONNX Runtime"
    other = SimpleNamespace(static_batch=True, file_batch=1, batch=2)
    assert whole_model_check(other, None) == (
        "float64 (ONNX Runtime not run: the file fixes its batch at 1, the run is at batch 2)"
    )
    symbolic = SimpleNamespace(static_batch=False, file_batch=4, batch=2)
    assert whole_model_check(symbolic, "float32") == "ONNX Runtime"
    assert whole_model_check(symbolic, "float16").startswith("float64 rounded as the float16")
