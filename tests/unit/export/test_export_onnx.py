"""`opbench export onnx`: every file ONNX Runtime runs reproduces the suite's float64 reference.

For each model of suites/quickstart.yaml and suites/cnn.yaml, the whole-model file and every
cut file are run by ONNX Runtime on the exported fixed input and compared, output by output,
with the float64 computation of the ops (`op.forward`) on the same seeded weights and input
from ModelData. The limit is the suite's float32 tolerance (relative L2 error 1e-4). Every
cut has one input and one output, and the weights are on disk once.

suites/cnn.yaml runs at batch 32 on 224×224 and 56×56 inputs: several GFLOP per prefix in
float64 on a 2-core CPU. It is exported here at batch 1 through a temporary copy of the suite
(same layers, weights seeded by the same names); every layer shape but the batch is the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.export.cuts import INLINE_BYTES
from opbench.spec.load import load_suite
from opbench.spec.model import DEFAULT_TOLERANCE, ModelSpec, SuiteSpec

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

SUITES = Path(__file__).parents[3] / "suites"
DATA = Path(__file__).parents[2] / "data" / "suites"  # cnn_chain.yaml: the chain cnn.yaml was
GRAPHS = Path(__file__).parents[2] / "data" / "suites" / "graphs.yaml"
runner = CliRunner()


def _cnn_at_batch_1(tmp_path: Path) -> Path:
    raw = yaml.safe_load((DATA / "cnn_chain.yaml").read_text())
    for model in raw["models"]:
        model["batch"] = 1
    path = tmp_path / "cnn.yaml"  # same file name and suite name: the same seeds
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def float64_outputs(suite: SuiteSpec, model: ModelSpec) -> list:
    """Each layer's float64 output along the model's graph, from ModelData's seeded weights
    and inputs (a model input's data is its first reader's, as the export feeds it)."""
    import torch

    from opbench.backends.base import torch_dtype
    from opbench.ops.registry import get_op
    from opbench.pipeline.data import ModelData

    data = ModelData(suite, model, "cpu")
    values: dict = {}
    outs = []
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            xs = []
            for position, value in enumerate(model.graph.reads[i]):
                if value not in values:  # a model input: first read here, as input 0
                    assert position == 0, (layer.name, value)
                    values[value] = data.input(i).to(torch.float64)
                xs.append(values[value])
            weights = {
                k: v.to(torch_dtype(layer.dtype)).to(torch.float64)
                for k, v in data.weights(i).items()
            }
            op = get_op(layer.op)
            x = op.forward(xs[0] if op.arity == 1 else tuple(xs), weights, layer)
            values[layer.name] = x
            outs.append(x.numpy())
    return outs


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))


def _run(out: Path, file: str, inputs: list[dict]) -> list:
    session = ort.InferenceSession(str(out / file))  # by path: the weights file is beside it
    feeds = {i["name"]: np.load(out / i["file"]) for i in inputs}
    assert [i["shape"] for i in inputs] == [list(f.shape) for f in feeds.values()]
    return session.run(None, feeds)


def _check_export(suite_path: Path, out: Path) -> int:
    done = runner.invoke(app, ["export", "onnx", str(suite_path), "--out", str(out)])
    assert done.exit_code == 0, done.output
    return check_files(suite_path, out)


def check_files(suite_path: Path, out: Path) -> int:
    """Every file of an export against the float64 reference; the number of cuts checked."""
    suite = load_suite(suite_path)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dtype"] == "float32" and manifest["suite"] == suite.name
    assert [m["name"] for m in manifest["models"]] == [m.name for m in suite.models]
    limit = DEFAULT_TOLERANCE["float32"]
    checked = 0
    for model, entry in zip(suite.models, manifest["models"], strict=True):
        assert [lay["name"] for lay in entry["layers"]] == [lay.name for lay in model.layers]
        assert [c["layer"] for c in entry["cuts"]] == [lay.name for lay in model.layers]
        assert entry["inputs"][0]["shape"] == list(model.layers[0].input_shape)
        expected = float64_outputs(suite, model)
        index = {layer.name: i for i, layer in enumerate(model.layers)}
        whole = _run(out, entry["file"], entry["inputs"])
        assert len(whole) == len(entry["outputs"])  # every end of the model is an output
        for got, meta in zip(whole, entry["outputs"], strict=True):
            assert rel_l2(got, expected[index[meta["layer"]]]) <= limit
        for cut in entry["cuts"]:
            proto = onnx.load(str(out / cut["file"]), load_external_data=False)
            names = {node.name for node in proto.graph.node}
            members = cut["members"]
            assert cut["layer"] == members[-1] and set(members) <= names
            assert all(n in members or n.split("/")[0] in members for n in names)
            assert len(cut["inputs"]) == 1 and len(cut["outputs"]) == 1
            (got,) = _run(out, cut["file"], cut["inputs"])
            want = expected[index[cut["layer"]]]
            assert got.shape == want.shape == tuple(cut["outputs"][0]["shape"])
            error = rel_l2(got, want)
            assert error <= limit, f"{model.name} cut {cut['cut']} {cut['layer']}: {error}"
            checked += 1
        # The weights are written once: the cut files hold the graph and small constants only.
        folder = out / entry["stem"]
        assert (out / entry["weights"]).stat().st_size == entry["weights_bytes"]
        assert sorted(p.suffix for p in folder.iterdir()).count(".weights") == 1
        for cut in entry["cuts"]:
            proto = onnx.load(str(out / cut["file"]), load_external_data=False)
            assert all(len(t.raw_data) < INLINE_BYTES for t in proto.graph.initializer)
    return checked


def test_quickstart_export_reproduces_reference(tmp_path: Path):
    assert _check_export(SUITES / "quickstart.yaml", tmp_path / "out") == 7 + 9 + 3


def test_cnn_export_reproduces_reference(tmp_path: Path):
    suite = _cnn_at_batch_1(tmp_path)
    # resnet_blocks has three chains (l3_conv2 and l4_conv2 set their own input): each cut
    # reads the input of its own chain only.
    assert _check_export(suite, tmp_path / "out") == 20  # one per layer


def test_graph_export_reproduces_reference(tmp_path: Path):
    """Residual adds, concats, ReLU6, a depthwise conv, and every other join op (mul, matmul,
    reshape, slice, split, GELU's tanh form): each cut, and the whole model, by ONNX Runtime."""
    assert _check_export(GRAPHS, tmp_path / "out") == 21 + 13 + 8 + 11


def test_op_without_onnx_form_is_bad_input(tmp_path: Path, monkeypatch):
    from opbench.ops.activation import GELU

    monkeypatch.delattr(GELU, "onnx_nodes")  # gelu's ONNX form is its op's own
    out = tmp_path / "out"
    done = runner.invoke(
        app, ["export", "onnx", str(SUITES / "quickstart.yaml"), "--out", str(out)]
    )
    assert done.exit_code == 2
    assert "layer 'gelu': op 'gelu' has no ONNX form" in done.output
    assert not out.exists()  # checked before anything is written


def test_op_with_an_onnx_op_and_no_emitter_exports_one_node(tmp_path: Path):
    """An elementwise op needs no form of its own: its `onnx_op` (relu's "Relu", declared in
    ops/activation.py alone) is exported as one node."""
    from opbench.ops.activation import Activation, ReLU

    assert ReLU.to_onnx is Activation.to_onnx and ReLU.onnx_nodes is Activation.onnx_nodes
    suite = tmp_path / "one_node.yaml"
    suite.write_text(
        "name: one_node\nmodels:\n  - name: m\n    batch: 2\n    input: [5, 7]\n    layers:\n"
        "      - {name: fc, op: linear, out_features: 6}\n      - {name: act, op: relu}\n"
    )
    assert _check_export(suite, tmp_path / "out") == 2  # one output per cut
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    proto = onnx.load(str(tmp_path / "out" / manifest["models"][0]["cuts"][-1]["file"]))
    assert [(n.name, n.op_type) for n in proto.graph.node if n.name == "act"] == [("act", "Relu")]


GROUPED = """name: gqa
defaults: {dtype: float32}
models:
  - name: m
    batch: 2
    input: [7, 96]
    layers:
      - {name: gqa, op: attention, heads: 4, kv_heads: 2, packed_qkv: true, causal: true}
"""


def test_grouped_query_attention_exports_with_its_kv_heads(tmp_path: Path):
    """[q | k | v] of 4 query and 2 kv heads: a Split by sizes and Attention(kv_num_heads=2)."""
    suite = tmp_path / "gqa.yaml"
    suite.write_text(GROUPED)
    assert _check_export(suite, tmp_path / "out") == 1


def test_kv_cache_attention_exports_with_its_cache(tmp_path: Path):
    """Decode attention over a KV cache: the cache an initializer, causal by an explicit mask."""
    suite = tmp_path / "decode.yaml"
    suite.write_text(GROUPED.replace("[7, 96]", "[3, 64]").replace(
        "packed_qkv: true, causal: true", "kv_len: 10, causal: true"))  # fmt: skip
    assert _check_export(suite, tmp_path / "out") == 1
