"""`opbench export onnx` of the transformer ops (embedding of int64 ids, rope in every layout
and form, attention in the bhsd layout with a padding mask, a decode step's KV-cache append):
ONNX Runtime on the exported whole-model file gives the suite's float64 reference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.pipeline.data import ModelData
from opbench.spec.load import load_suite

ort = pytest.importorskip("onnxruntime")

SUITE = """
name: transformer_ops
defaults: {backends: [torch], dtype: float32}
models:
  - name: enc
    batch: 2
    inputs:
      ids: {shape: [7], dtype: int64}
      attention_mask: {shape: [7], dtype: int64, padding_mask: true}
    layers:
      - {name: tok, op: embedding, num_embeddings: 50, embedding_dim: 32, inputs: [ids]}
      - {name: pos, op: embedding, num_embeddings: 20, embedding_dim: 32, positions: true,
         offset: 3, inputs: [ids]}
      - {name: sum, op: add, inputs: [tok, pos]}
      - {name: q, op: linear, out_features: 32}
      - {name: k, op: linear, out_features: 16, inputs: [sum]}
      - {name: v, op: linear, out_features: 16, inputs: [sum]}
      - {name: qr, op: reshape, shape: [7, 2, 16], inputs: [q]}
      - {name: qt, op: transpose, dims: [1, 2]}
      - {name: kr, op: reshape, shape: [7, 1, 16], inputs: [k]}
      - {name: kt, op: transpose, dims: [1, 2]}
      - {name: vr, op: reshape, shape: [7, 1, 16], inputs: [v]}
      - {name: vt, op: transpose, dims: [1, 2]}
      - {name: qrot, op: rope, inputs: [qt]}
      - {name: krot, op: rope, inputs: [kt], style: interleaved, theta: 500.0}
      - {name: attn, op: attention, heads: 2, kv_heads: 1, layout: bhsd, mask: true,
         causal: true, inputs: [qrot, krot, vt, attention_mask]}
  - name: dec
    batch: 2
    input: [1, 32]
    layers:
      - {name: qkv, op: linear, out_features: 64}
      - {name: rope, op: rope, layout: packed, heads: 2, kv_heads: 1, offset: 8}
      - {name: attn, op: attention, heads: 2, kv_heads: 1, kv_len: 9, packed_qkv: true,
         append: true, causal: true}
      - {name: rows, op: rope, layout: rows, head_dim: 16, style: interleaved, offset: 8,
         inputs: [attn]}
"""


def test_exported_transformer_ops_match_the_float64_reference(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SUITE)
    done = CliRunner().invoke(app, ["export", "onnx", str(path), "--out", str(tmp_path / "o")])
    assert done.exit_code == 0, done.output
    suite = load_suite(path)
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    for model, entry in zip(suite.models, manifest["models"], strict=True):
        session = ort.InferenceSession(str(tmp_path / "o" / entry["file"]))
        feeds = {i["name"]: np.load(tmp_path / "o" / i["file"]) for i in entry["inputs"]}
        if model.name == "enc":
            assert feeds["ids"].dtype == np.int64 and feeds["attention_mask"].dtype == np.int64
        (got,) = session.run(None, feeds)
        refs, _ = ModelData(suite, model, "cpu").model_reference()
        want = refs[len(model.layers) - 1].numpy()
        error = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert error < 1e-5, f"{model.name}: rel L2 {error:.1e}"
