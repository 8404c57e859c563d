"""What DLPy's layer API cannot build is named at export time, with the reason, and what it
times with a stand-in is said in the manifest and the CSV's status (docs/sas.md).

tests/data/suites/llama_tiny.yaml: a LLaMA block (causal attention, RMSNorm, SiLU, SwiGLU's
product), a grouped-query attention, and an attention of separate q, k, v projections, which
DLPy's MultiHeadAttention does build: its kernel laid out from three projections (one without
bias, which gets a zero bias) is checked in numpy against the layer's output (the stand-in
cannot score; tests/unit/export/dlpy_numpy.py).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app

pytest.importorskip("swat")
pytest.importorskip("dlpy")
h5py = pytest.importorskip("h5py")
ort = pytest.importorskip("onnxruntime")

from tests.unit.export.dlpy_numpy import dlpy_forward  # noqa: E402
from tests.unit.export.test_export_sas_graph import StandIn, run_script  # noqa: E402

SUITE = Path(__file__).parents[2] / "data" / "suites" / "llama_tiny.yaml"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("sas_gaps") / "sas"
    done = CliRunner().invoke(app, ["export", "sas", str(SUITE), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return out, " ".join(done.output.split())


def _models(out: Path) -> dict[str, dict]:
    return {m["name"]: m for m in json.loads((out / "manifest.json").read_text())["models"]}


def test_layers_without_a_dlpy_equivalent_are_named_with_the_reason(exported):
    out, text = exported
    for model, layer, why in [
        ("llama_block", "attn", "DLPy's MultiHeadAttention has no causal mask"),
        ("llama_block", "gate_act", "DLPy has no SiLU (swish) activation"),
        ("llama_block", "swiglu", "DLPy has no elementwise product of two activations "
         "(SwiGLU's product)"),
        ("gqa", "attn", "DLPy's MultiHeadAttention has no kv-head count (grouped-query "
         "attention)"),
    ]:  # fmt: skip
        assert f"warning: {model}: layer '{layer}'" in text and why in text, (model, layer)
        status = {x["name"]: x["sas"] for x in _models(out)[model]["layers"]}[layer]
        assert status["status"] == "refused" and why in status["why"]
    assert "llama_block: SAS can time 5 of 12 layers" in text


def test_rmsnorm_is_timed_as_layernorm_and_says_so(exported, tmp_path: Path):
    out, text = exported
    # Notices that say the same of several layers are one line (cli/export.grouped_notices).
    stand_in = [line for line in text.splitlines() if "RMSNorm timed as " in line]
    assert stand_in and "llama_block" in stand_in[0] and "attn_norm" in stand_in[0]
    layers = {x["name"]: x["sas"] for x in _models(out)["llama_block"]["layers"]}
    assert layers["attn_norm"]["status"] == "stand-in"
    # after the causal attention, the feed-forward starts a piece from attn_res's output
    assert layers["ffn_norm"]["reads"] == ["attn_res.output"]
    assert layers["ffn_norm"]["status"] == "stand-in"
    done = run_script(out, tmp_path, StandIn(lambda model, call: 1.0 + 0.01 * call),
                      "--model", "llama_block")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    lines = (out / "sas_prefix_llama_block.csv").read_text().splitlines()
    rows = {r["layer"]: r for r in csv.DictReader(x for x in lines if not x.startswith("#"))}
    assert rows["attn_norm"]["status"].startswith("stand-in: RMSNorm timed as LayerNormalization")
    assert rows["attn_norm"]["prefix_median_ms"]
    assert rows["ffn_norm"]["inputs"] == "attn_res.output"
    assert rows["attn_res.output"]["type"] == "input"  # the piece's baseline
    assert rows["swiglu"]["status"].startswith("not timed: ")


def test_separate_projections_make_one_multiheadattention(exported):
    out, _text = exported
    model = _models(out)["separate_qkv"]
    cut = next(c for c in model["cuts"] if c["layer"] == "o_proj")
    (mha,) = cut["sas"]["layers"]
    assert mha["type"] == "mha" and mha["covers"] == ["q", "k", "v", "attn", "o_proj"]
    assert mha["config"]["act"] == "relu" and mha["config"]["include_bias"] is True
    h5 = h5py.File(out / model["sas_layer_api"]["weights"], "r")
    assert h5["o_proj"]["o_proj/kernel:0"].shape == (16, 64)
    bias = h5["o_proj"]["o_proj/bias:0"][()]
    assert not bias[32:48].any() and bias[:32].any()  # v has no bias: zeros in its place
    x = np.load(out / model["inputs"][0]["file"])
    want = ort.InferenceSession(str(out / cut["file"])).run(None, {"input": x})[0]
    got = dlpy_forward(cut["sas"], h5, x.astype(np.float64))
    assert np.abs(got - want).max() <= 1e-4 * max(1.0, np.abs(want).max())
