"""`opbench export sas` of a transformer: the cuts DLPy's ONNX import refuses are built with
DLPy's layer API, and the generated script times them against the stand-in CAS server with the
real swat and sas-dlpy.

The model is tests/data/suites/transformer_tiny.yaml: suites/transformer.yaml's BERT-base
encoder layer (packed qkv, attention, output projection, residual, layer norm, GELU FFN,
residual, layer norm) at hidden 16, 2 heads, 8 tokens. The stand-in cannot score (it answers
dlScore with canned times), so DLPy's computation is checked in numpy: what DLPy's layer
definitions imply (Dense y = A·x + b with A as BERT_Model stores it, MultiHeadAttention from its
packed (E, 3E + n) kernel, LayerNormalization, Res), from the HDF5 weights the script loads,
against the layer's output (ONNX Runtime on the cut's ONNX file).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.reference.interface import ReaderOptions
from opbench.reference.sas_prefix import READER

pytest.importorskip("swat")
pytest.importorskip("dlpy")
h5py = pytest.importorskip("h5py")
ort = pytest.importorskip("onnxruntime")

from tests.unit.export.dlpy_numpy import dlpy_forward  # noqa: E402
from tests.unit.export.test_export_sas_graph import (  # noqa: E402
    StandIn,
    canned_times,
    run_script,
)

SUITE = Path(__file__).parents[2] / "data" / "suites" / "transformer_tiny.yaml"
# DLPy's layer type per cut's last layer, as addLayer receives them.
TYPES = {"qkv": "fc", "attn_out": "mhattention", "attn_res": "residual", "ln1": "layernorm",
         "ffn_up": "fc", "ffn_down": "fc", "ffn_res": "residual", "ln2": "layernorm"}  # fmt: skip


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sas_layers") / "sas"
    done = CliRunner().invoke(app, ["export", "sas", str(SUITE), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "SAS can time 8 of 9 layers" in " ".join(done.output.split())
    return out


def _model(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())["models"][0]


def _helper(out: Path):
    spec = importlib.util.spec_from_file_location("sas_layer_api_test", out / "sas_layer_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_cut_is_built_by_dlpy_and_its_summary_has_the_layers(bundle: Path):
    model = _model(bundle)
    helper = _helper(bundle)
    cuts = {c["layer"]: c for c in model["cuts"]}
    assert cuts["attn"]["sas"]["status"] == "refused"  # inside the MultiHeadAttention
    h5 = h5py.File(bundle / model["sas_layer_api"]["weights"], "r")
    for name, kind in TYPES.items():
        sas = cuts[name]["sas"]
        assert sas["api"] == "layers", name
        layers = helper.dlpy_layers(sas)
        assert layers[0].type == "input" and layers[-1].type == "output"
        assert layers[-2].type == kind and layers[-2].name == name
        for layer in layers[1:-1]:  # DLPy's summary: type, output size, parameters
            row = layer.summary.iloc[0]
            assert row["Type"] == layer.type
            size = {"qkv": 48, "ffn_up": 32}.get(layer.name, 16)
            assert row["Output Size"] == size, (name, layer.name)
            if layer.type in ("fc", "mhattention", "layernorm"):  # the HDF5 holds them
                kernel = h5[layer.name][f"{layer.name}/kernel:0"]
                assert kernel.size == layer.num_weights, (layer.name, kernel.shape)
    # GELU on the FFN's Dense (folded as BERT_Model does), attention's q/k/v in the MHA
    ffn = helper.dlpy_layers(cuts["ffn_up"]["sas"])[-2]
    assert ffn.config["act"] == "gelu"
    mha = helper.dlpy_layers(cuts["attn_out"]["sas"])[-2]
    assert mha.config["n_attn_heads"] == 2 and h5["attn_out"]["attn_out/kernel:0"].shape == (16, 64)
    names = [n.decode() if isinstance(n, bytes) else n for n in h5.attrs["layer_names"]]
    assert names == ["qkv", "attn_out", "ln1", "ffn_up", "ffn_down", "ln2"]


def test_script_times_every_cut_and_compare_reads_every_layer(bundle: Path, tmp_path: Path):
    by_model, truth = canned_times(bundle)
    standin = StandIn(lambda model, call: by_model[model] + 0.01 * (call % 3))
    done = run_script(bundle, tmp_path, standin)
    assert done.returncode == 1, done.stdout + done.stderr  # attn's own cut: not timed
    added = [c.params for c in standin.calls if c.action == "deeplearn.addlayer"]
    for name, kind in TYPES.items():
        cut = next(c for c in _model(bundle)["cuts"] if c["layer"] == name)
        model = f"opb_bert_layer_{cut['cut']:03d}"
        mine = {p["name"]: p["layer"]["type"] for p in added if p["model"] == model}
        assert mine[name] == kind and mine["input"] == "input" and mine["output"] == "output"
    built = {c.params["model"]["name"]: c.params["type"] for c in standin.calls
             if c.action == "deeplearn.buildmodel"}  # fmt: skip
    assert set(built.values()) == {"RNN"} and len(built) == 9  # baseline and 8 cuts
    loads = [c.params for c in standin.calls if c.action == "deeplearn.dlimportmodelweights"]
    assert len(loads) == 8 and loads[0]["formatType"] == "KERAS"
    assert loads[0]["dataSpecs"][0]["numericnominalparms"]["tokensize"] == 16

    path = bundle / "sas_prefix_bert_layer.csv"
    # ffn_down carries a SAS profile's name (reference_name: FC_2): the rows are named
    # /<model>/<layer>, which compare matches to the layers (docs/sas.md)
    rows = {r["layer"].removeprefix("/bert_layer/"): r for r in csv.DictReader(
        line for line in path.read_text().splitlines() if not line.startswith("#"))}  # fmt: skip
    assert rows["attn_out"]["status"].startswith("stand-in: attention and its output projection")
    profile = READER.read(path, ReaderOptions())
    derived = {t.name.replace("/bert_layer/", ""): t for t in profile.layers if t.status == "timed"}
    assert set(derived) == {*TYPES, "attn + attn_out"} - {"attn_out"}
    for name, row in derived.items():  # attention with its output projection: one row
        want = sum(truth["bert_layer"][part] for part in name.split(" + "))
        assert row.time_ms == pytest.approx(want, abs=1e-6), name
    assert any(
        "timed with a stand-in in SAS" in n and "/bert_layer/attn_out" in n for n in profile.notes
    )


def test_dlpy_computation_of_each_cut_is_the_layers_output(bundle: Path):
    model = _model(bundle)
    h5 = h5py.File(bundle / model["sas_layer_api"]["weights"], "r")
    x = np.load(bundle / model["inputs"][0]["file"]).astype(np.float64)
    for cut in model["cuts"]:
        if cut["sas"].get("api") != "layers":
            continue
        session = ort.InferenceSession(str(bundle / cut["file"]))
        want = session.run(None, {"input": x.astype(np.float32)})[0]
        got = dlpy_forward(cut["sas"], h5, x)
        assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max()), cut["layer"]


def test_compare_reads_the_csv_with_no_layer_missing(bundle: Path, tmp_path: Path, monkeypatch):
    """`opbench run` of the suite (torch, CPU) and `opbench compare` on the script's CSV: every
    layer has a row and a verdict; the attention shares its output projection's."""
    by_model, _truth = canned_times(bundle)
    done = run_script(bundle, tmp_path, StandIn(lambda model, call: by_model[model] + 0.01 * call))
    assert done.returncode == 1, done.stdout + done.stderr
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["run", str(SUITE), "--backend", "torch", "--quick", "--device",
                               "cpu"])  # fmt: skip
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["compare", "--reference", str(bundle / "sas_prefix_bert_layer.csv"),
                               "--model", "bert_layer", "--backend", "torch", "--no-gate"])  # fmt: skip
    assert done.exit_code in (0, 1), done.output
    (folder,) = [p for p in (tmp_path / "reports").glob("*/*") if p.is_dir() and not p.is_symlink()]
    rows = json.loads((folder / "comparison.json").read_text())["rows"]
    verdicts = {tuple(r["layers"]): [t["verdict"] for t in r["timings"]] for r in rows}
    assert set(verdicts) == {("attn", "attn_out"), *((n,) for n in TYPES if n != "attn_out")}
    assert all(v and set(v) <= {"PASS", "FAIL", "UNCERTAIN"} for v in verdicts.values())
