"""`opbench export sas`: the generated script runs with the real swat and sas-dlpy packages
against a local stand-in CAS server (REST over HTTP, canned timings), and the CSV it writes
is read back by `opbench compare` to a verdict.

The stand-in records every action. On quickstart's cnn (a chain) it refuses the weights
import of cut 3 (a server-side failure); export already found that DLPy's importer cannot take
cuts 7-9 (a Transpose), and the script does not send them: both are rows without a time
whose status says why, and the other cuts are measured. The graph models (a residual model,
a branching model: tests/unit/export/test_export_sas_graph.py) go the same way.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app

pytest.importorskip("swat")
pytest.importorskip("dlpy")
pytest.importorskip("h5py")
pytest.importorskip("onnx")

from tests.unit.export.cas_standin import StandIn, client_env, serve  # noqa: E402

QUICKSTART = Path(__file__).parents[3] / "suites" / "quickstart.yaml"
runner = CliRunner()


def score_ms(model: str, call: int) -> float:
    """Canned dlScore time: the baseline (`..._in0`) 0.5 ms, cut k 0.5 + k ms, with a spread
    of 0.01 ms between calls."""
    tail = model.rsplit("_", 1)[-1]
    return 0.5 + (0.0 if tail.startswith("in") else float(tail)) + 0.01 * (call % 3)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    out = tmp_path / "sas"
    done = runner.invoke(
        app, ["export", "sas", str(QUICKSTART), "--model", "cnn", "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert (
        "warning: cnn: layer 'to_nhwc' (permute → Transpose): DLPy's ONNX import has no "
        "Transpose (it raises 'Unsupported op'); not timed, nor the 2 layer(s) that depend on "
        "it (flat, gelu)" in text
    )
    assert "cnn: SAS can time 6 of 9 layers; the script records the other 3 as not timed" in text
    assert "build the model with DLPy's layer API" in text
    return out


def _run_script(bundle: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(bundle / "time_sas_prefixes.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_script_times_prefixes_against_standin_and_compare_reads_it(
    bundle: Path, tmp_path: Path, monkeypatch
):
    standin = StandIn(score_ms, fail={("deeplearn.dlimportmodelweights", "opb_cnn_003")})
    server, port = serve(standin)
    env = client_env(tmp_path / "home", port)
    try:
        done = _run_script(bundle, env, "--username", "tester", "--warmup", "1", "--repeats", "3")
    finally:
        server.shutdown()
    assert done.returncode == 1, done.stderr  # some cuts not timed: said by the exit code
    assert "[cnn 1/10] baseline input: " in done.stdout and "[cnn 2/10] cut conv1: " in done.stdout
    assert "opbench compare --reference" in done.stdout and "--model 'cnn'" in done.stdout

    # Credentials came from the authinfo file, and are in no file the export wrote.
    token = "Basic " + base64.b64encode(b"tester:s3cret").decode()
    assert {c.authorization for c in standin.calls} == {token}
    assert not any("s3cret" in p.read_text(errors="ignore") for p in bundle.glob("*.py"))

    actions = [c.action for c in standin.calls]
    # the baseline and cuts 1-6 were built; 7-9 were never sent (export found the Transpose)
    built = [c.params["model"]["name"] for c in standin.calls if c.action == "deeplearn.buildmodel"]
    assert built == ["opb_cnn_in0", *(f"opb_cnn_{k:03d}" for k in range(1, 7))]
    assert actions.count("deeplearn.dlscore") == 6 * (1 + 3)  # cut 3 failed before scoring
    weights = [c.params for c in standin.calls if c.action == "deeplearn.dlimportmodelweights"]
    assert [w["model"] for w in weights] == [f"opb_cnn_{k:03d}" for k in range(1, 7)]
    assert weights[0]["caslib"] == "OPBENCHW" and weights[0]["formatType"] == "KERAS"
    # each cut's HDF5 file is deleted once CAS has read it: the weights are not piled up
    assert not list((bundle / "sas_weights").glob("*.h5"))
    scored = [c.params for c in standin.calls if c.action == "deeplearn.dlscore"]
    assert "initWeights" not in scored[0] and scored[-1]["initWeights"] == "opb_cnn_006_weights"
    dropped = {c.params["name"] for c in standin.calls if c.action == "table.droptable"}
    assert {"opb_cnn_001", "opb_cnn_001_weights", "opb_cnn_001_scored"} <= dropped
    (caslib,) = [c.params for c in standin.calls if c.action == "table.addcaslib"]
    assert caslib["path"] == str((bundle / "sas_weights").resolve())
    (upload,) = [c for c in standin.calls if c.action == "table.upload"]
    assert upload.body_bytes > 0 and upload.params["casout"]["name"] == "opb_in_cnn_input"
    added = [c.params["name"] for c in standin.calls if c.action == "deeplearn.addlayer"]
    assert {"conv1", "bn1", "conv2"} <= set(added)  # DLPy's layers carry the suite's names

    lines = (bundle / "sas_prefix_cnn.csv").read_text().splitlines()
    comments = [line for line in lines if line.startswith("#")]
    assert comments[0].startswith("# cut 4 (relu1): failed: dlImportModelWeights: ERROR:")
    assert [c.split(":")[0] for c in comments[1:]] == [
        "# cut 8 (to_nhwc)", "# cut 9 (flat)", "# cut 10 (gelu)"
    ]  # fmt: skip
    assert "not timed: DLPy's ONNX import has no Transpose" in comments[1]
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert [r["layer"] for r in rows] == [
        "input", "conv1", "bn1", "relu1", "pool1", "conv2", "pool2", "to_nhwc", "flat", "gelu"
    ]  # fmt: skip
    assert [r["inputs"] for r in rows[1:4]] == ["input", "conv1", "bn1"]
    timed = {r["layer"]: r for r in rows if r["prefix_median_ms"]}
    assert list(timed) == ["input", "conv1", "bn1", "pool1", "conv2", "pool2"]
    for cut, name in enumerate(timed):
        row = timed[name]
        k = 0 if name == "input" else cut + (cut >= 3)  # relu1 (cut 3) has no time
        # median of calls 1, 2, 3 (call 0 is the warm-up)
        assert float(row["prefix_median_ms"]) == pytest.approx(0.5 + k + 0.01)
        assert float(row["prefix_std_ms"]) == pytest.approx(0.01)
        assert row["runs"] == "3" and row["status"] == "ok"
    assert rows[3]["status"].startswith("failed: dlImportModelWeights")

    # The CSV is a sas-prefix reference for `opbench compare`.
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(
        app,
        [
            "run",
            str(QUICKSTART),
            "--model",
            "cnn",
            "--backend",
            "torch",
            "--quick",
            "--device",
            "cpu",
        ],
    )
    assert done.exit_code == 0, done.output
    done = runner.invoke(
        app,
        ["compare", "--reference", str(bundle / "sas_prefix_cnn.csv"), "--model", "cnn",
         "--backend", "torch", "--no-gate"],
    )  # fmt: skip
    assert done.exit_code in (0, 1), done.output  # a verdict: targets met, or missed
    assert "sas-prefix" in done.output
    (run_folder,) = [
        p
        for p in (tmp_path / "reports" / "quickstart").iterdir()
        if p.is_dir() and not p.is_symlink()
    ]
    data = json.loads((run_folder / "comparison.json").read_text())
    rows_by_layer = {tuple(r["layers"]): r for r in data["rows"]}
    # each layer's time: its cut minus the one before (conv1: minus the baseline)
    assert rows_by_layer[("conv1",)]["reference"]["value"] == pytest.approx(1.0)
    assert rows_by_layer[("bn1",)]["reference"]["value"] == pytest.approx(1.0)
    assert rows_by_layer[("relu1", "pool1")]["reference"]["value"] == pytest.approx(2.0)
    verdicts = {
        tuple(r["layers"]): [t["verdict"] for t in r["timings"] if t["backend"] == "torch"]
        for r in data["rows"]
    }
    matched = [("conv1",), ("bn1",), ("relu1", "pool1"), ("conv2",), ("pool2",)]
    assert list(verdicts)[:5] == matched
    assert all(v and set(v) <= {"PASS", "FAIL", "UNCERTAIN"} for v in list(verdicts.values())[:5])
    # The cuts DLPy could not import leave their layers uncovered: MISSING, never guessed
    # (flatten moves no data and is exempt).
    assert {k: v for k, v in verdicts.items() if k not in matched} == {
        ("to_nhwc",): ["MISSING"], ("gelu",): ["MISSING"]
    }  # fmt: skip


def test_script_without_connection_settings_is_bad_input(bundle: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAS")}
    done = _run_script(bundle, env)
    assert done.returncode == 2
    assert "no CAS host (--host or CASHOST) and no CAS port (--port or CASPORT)" in done.stderr
    assert not list(bundle.glob("sas_prefix_*.csv"))


def test_script_reports_unreachable_server(bundle: Path):
    env = dict(os.environ, CASHOST="127.0.0.1", CASPORT="9", CASPROTOCOL="http")
    done = _run_script(bundle, env, "--username", "u", "--authinfo", os.devnull)
    assert done.returncode == 2
    assert "error: cannot connect to CAS at 127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr
