"""An imported ViT through `opbench export sas`: a mixed model, its patch conv cut from ONNX,
its encoder and head built with DLPy's layer API from pieces of their own, timed by the script
against the stand-in CAS server (real swat and sas-dlpy) into one CSV that the reader and
`opbench compare` read as they are.

The model is tests/data/onnx_models.py's `vit_tiny` (torchvision's VisionTransformer, 16x16
images, one encoder block of width 16), imported with `opbench suite from-onnx`. What DLPy
has no layer for (the flatten, transpose, class-token concat and position add of the patch
embedding, the class token's slice) is named at export and is the only thing compare shows
MISSING. DLPy's computation of each layer-API cut is held in numpy against the layer's output
(tests/unit/export/dlpy_numpy.py: the stand-in cannot score).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import onnx_models_module
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.reference.interface import ReaderOptions
from opbench.reference.sas_prefix import READER

pytest.importorskip("swat")
pytest.importorskip("dlpy")
h5py = pytest.importorskip("h5py")
ort = pytest.importorskip("onnxruntime")
try:
    onnx_models_module()._import_torchvision()
except ImportError:
    pytest.skip("the ViT needs torchvision (the test extras)", allow_module_level=True)

from tests.unit.export.cas_standin import StandIn  # noqa: E402
from tests.unit.export.dlpy_numpy import dlpy_forward  # noqa: E402
from tests.unit.export.test_export_sas_graph import layer_ms, run_script  # noqa: E402

runner = CliRunner()
BASELINE_MS = 0.4
BLOCK = "encoder.layers.encoder_layer_0."
# Not timed: no DLPy layer (ONNX import and layer API both refuse them).
NOT_TIMED = {"permute", "cat", "encoder.add", "select", "select_2"}
ATTENTION = BLOCK + "self_attention.scaled_dot_product_attention"
O_PROJ = BLOCK + "self_attention.out_proj"


@pytest.fixture(scope="module")
def vit(onnx_models, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("sas_vit")
    suite = folder / "vit_tiny.yaml"
    done = runner.invoke(app, ["suite", "from-onnx", str(onnx_models["vit_tiny"]), "--out",
                               str(suite)])  # fmt: skip
    assert done.exit_code == 0, done.output
    out = folder / "sas"
    done = runner.invoke(app, ["export", "sas", str(suite), "--out", str(out)])
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "layer 'select' (slice): DLPy's layer API: DLPy's layer API has no slice" in text
    assert "SAS can time 12 of 18 layers" in text
    return suite, out


def _model(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["models"][0]


def _sas_members(cut: dict) -> list[str]:
    """The layers a cut holds as SAS builds it (a piece stops at its input)."""
    if cut["sas"].get("api") == "layers":
        return [m for entry in cut["sas"]["layers"] for m in entry["covers"]]
    return cut["members"]


def test_cuts_go_through_onnx_or_the_layer_api_and_the_gaps_are_named(vit):
    _suite, out = vit
    model = _model(out)
    apis = {c["layer"]: c["sas"].get("api", "onnx") for c in model["cuts"]
            if c["sas"]["status"] == "ok"}  # fmt: skip
    assert apis["conv_proj"] == "onnx" and apis["heads.head"] == "layers"
    assert {n for n, a in apis.items() if a == "layers"} >= {BLOCK + "ln_1", O_PROJ, "encoder.ln"}
    status = {layer["name"]: layer["sas"] for layer in model["layers"]}
    assert {n for n, s in status.items() if s["status"] in ("refused", "not timed")} == {
        *NOT_TIMED, ATTENTION}  # fmt: skip
    assert "cannot build it either" in status["permute"]["why"]
    # the encoder starts from the position add's output, the head from the class token's
    ln1 = next(c for c in model["cuts"] if c["layer"] == BLOCK + "ln_1")
    assert ln1["sas"]["input"]["tensor"] == "encoder.add.output"
    assert status[BLOCK + "ln_1"]["reads"] == ["encoder.add.output"]
    assert {b["input"] for b in model["baselines"]} >= {"encoder.add.output", "select_2.output"}
    helper_path = out / "sas_layer_api.py"
    spec = importlib.util.spec_from_file_location("sas_layer_api_vit", helper_path)
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    h5 = h5py.File(out / model["sas_layer_api"]["weights"], "r")
    for cut in model["cuts"]:
        if cut["sas"].get("api") != "layers":
            continue
        layers = helper.dlpy_layers(cut["sas"])  # DLPy builds it; its summary has each layer
        for layer in layers[1:-1]:
            assert layer.summary.iloc[0]["Type"] == layer.type
            if layer.type in ("fc", "mhattention", "layernorm"):
                assert h5[layer.name][f"{layer.name}/kernel:0"].size == layer.num_weights
        x = np.load(out / cut["sas"]["input"]["file"]).astype(np.float64)
        session = ort.InferenceSession(str(out / cut["file"]))
        feeds = {i["name"]: np.load(out / i["file"]) for i in cut["inputs"]}
        want = session.run(None, feeds)[0]
        got = dlpy_forward(cut["sas"], h5, x)
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max()), cut["layer"]


def test_script_writes_one_csv_that_the_reader_and_compare_read(vit, tmp_path, monkeypatch):
    suite, out = vit
    model = _model(out)
    truth = {layer["name"]: layer_ms(i) for i, layer in enumerate(model["layers"])}
    canned = {f"opb_{model['stem']}_in{i}": BASELINE_MS for i in range(len(model["baselines"]))}
    for cut in model["cuts"]:
        total = BASELINE_MS + sum(truth[m] for m in _sas_members(cut))
        canned[f"opb_{model['stem']}_{cut['cut']:03d}"] = total
    done = run_script(out, tmp_path, StandIn(lambda m, call: canned[m] + 0.01 * (call % 3)))
    assert done.returncode == 1, done.stdout + done.stderr  # the gaps: not timed
    path = out / f"sas_prefix_{model['stem']}.csv"
    profile = READER.read(path, ReaderOptions())
    # the suite's layers carry the ONNX file's node names (reference_name): the rows are
    # named /<model>/<layer>, which compare matches to the layers
    prefix = f"/{model['name']}/"
    derived = {t.name.replace(prefix, ""): t.time_ms for t in profile.layers if t.status == "timed"}
    timed = set(truth) - NOT_TIMED - {ATTENTION, O_PROJ}
    assert set(derived) == timed | {f"{ATTENTION} + {O_PROJ}"}
    for name, value in derived.items():
        assert value == pytest.approx(sum(truth[p] for p in name.split(" + ")), abs=1e-6), name

    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["run", str(suite), "--backend", "torch", "--quick", "--device",
                               "cpu"])  # fmt: skip
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["compare", "--reference", str(path), "--model", model["name"],
                               "--backend", "torch", "--no-gate"])  # fmt: skip
    assert done.exit_code in (0, 1), done.output
    (folder,) = [p for p in (tmp_path / "reports").glob("*/*") if p.is_dir() and not p.is_symlink()]
    rows = json.loads((folder / "comparison.json").read_text())["rows"]
    missing = {r["layers"][0] for r in rows
               if [t["verdict"] for t in r["timings"]] == ["MISSING"]}  # fmt: skip
    # only layers DLPy has no layer for; the class token's slice and flatten, views that move
    # no data, are exempt from MISSING as flatten is for the CNNs
    assert missing == {"permute", "cat", "encoder.add"}
    assert {tuple(r["layers"]) for r in rows} >= {(ATTENTION, O_PROJ), (BLOCK + "ln_1",)}
