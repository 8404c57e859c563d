"""Hugging Face exports in (issue 41): LlamaModel, Qwen2Model, BertModel, DistilBertModel and
ViTModel, exported by `torch.onnx.export(model, (input_ids,), f)`, import connected with no
placeholder, layers named by module path, and `opbench run model.onnx` checks the whole output
of each backend against ONNX Runtime's."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.importers.onnx import import_onnx

runner = CliRunner()
MODELS = ("hf_llama", "hf_qwen2", "hf_bert", "hf_distilbert", "hf_vit")


def _imported(hf_models, name: str):
    started = time.perf_counter()
    imported = import_onnx(hf_models[name], batch=None, dims={})
    print(f"imported {name} in {time.perf_counter() - started:.2f} s")
    return imported


@pytest.mark.parametrize("name", MODELS)
def test_imports_connected_with_no_placeholder(hf_models, name: str):
    imported = _imported(hf_models, name)
    assert imported.unsupported == []
    assert not [layer for layer in imported.layers if layer.placeholder_for]
    ops = {layer.op for layer in imported.layers}
    assert "attention" in ops and not ops & {"matmul", "softmax", "placeholder"}


@pytest.mark.parametrize("name", ["hf_llama", "hf_qwen2"])
def test_llama_and_qwen2_are_rope_and_one_grouped_query_attention(hf_models, name: str):
    layers = {layer.name: layer for layer in _imported(hf_models, name).layers}
    assert layers["embed_tokens"].op == "embedding"
    assert layers["embed_tokens"].params == {"num_embeddings": 512, "embedding_dim": 64}
    assert layers["layers.0.input_layernorm"].op == "rmsnorm"
    q_proj = layers["layers.0.self_attn.q_proj"]
    assert q_proj.op == "linear" and q_proj.params["bias"] is (name == "hf_qwen2")
    ropes = [layer for layer in layers.values() if layer.op == "rope"]
    assert len(ropes) == 4  # q and k of each of the 2 layers
    assert all(r.params == {"layout": "rows", "head_dim": 16, "theta": 10000.0} for r in ropes)
    assert [r.inputs[0] for r in ropes[:2]] == [
        "layers.0.self_attn.q_proj",
        "layers.0.self_attn.k_proj",
    ]
    (attention,) = [
        layer for layer in layers.values() if layer.op == "attention" and "layers.0." in layer.name
    ]
    assert attention.params == {"heads": 4, "kv_heads": 2, "causal": True, "separate_qkv": True}
    assert attention.inputs == (ropes[0].name, ropes[1].name, "layers.0.self_attn.v_proj")


def test_bert_embeddings_norms_and_gelu(hf_models):
    layers = {layer.name: layer for layer in _imported(hf_models, "hf_bert").layers}
    assert layers["embeddings.word_embeddings"].op == "embedding"
    assert layers["embeddings.word_embeddings"].inputs == ("input",)
    norm = layers["embeddings.LayerNorm"]
    assert norm.op == "layernorm" and set(norm.weights) == {"weight", "bias"}
    assert layers["encoder.layer.0.intermediate.dense"].params["activation"] == "gelu"
    attention = next(v for v in layers.values() if v.op == "attention")
    assert attention.params == {"heads": 4, "separate_qkv": True}  # the all-ones mask hides none


def test_no_constant_folding_message_reaches_the_user(hf_models, tmp_path: Path):
    # BERT's token-type ids are a GatherElements of two constants that ONNX's reference
    # evaluator fails on ("Evaluation failed: cannot reshape array ..."): folded by numpy.
    out = tmp_path / "bert.yaml"
    done = runner.invoke(app, ["suite", "from-onnx", str(hf_models["hf_bert"]), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "Evaluation failed" not in done.output and "Traceback" not in done.output
    assert "input: {shape: [8], dtype: int64}" in out.read_text()


def _run(path: Path, out: Path, *backends: str) -> dict:
    extra = [arg for b in backends for arg in ("--backend", b)]
    done = runner.invoke(
        app, ["run", str(path), "--quick", "--rounds", "1", "--device", "cpu", "--out", str(out),
              *extra],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return json.loads(next(out.glob("*/latest/run.json")).read_text())


def _checked_against_ort(run: dict, backends: tuple[str, ...]) -> None:
    assert all(r["status"] == "ok" and not r["correctness"]["failures"] for r in run["layers"])
    eager = {e["backend"]: e for e in run["end_to_end"] if e["mode"] == "eager"}
    assert set(eager) == set(backends)
    for row in eager.values():
        assert row["status"] == "ok"
        assert row["correctness"]["reference"] == "onnxruntime-cpu-float32"
        assert not row["correctness"]["failures"], row["correctness"]


@pytest.mark.parametrize(("name", "causal"), [("hf_bert_mask", False), ("hf_llama_mask", True)])
def test_the_attention_mask_input_is_the_key_padding_mask(hf_models, name: str, causal: bool):
    imported = _imported(hf_models, name)
    assert imported.unsupported == []
    mask = next(i for i in imported.inputs if i.source == "attention_mask")
    assert mask.dtype == "int64" and mask.padding_mask
    attentions = [layer for layer in imported.layers if layer.op == "attention"]
    assert len(attentions) == 2
    for layer in attentions:
        assert layer.params["mask"] is True and layer.inputs[-1] == mask.name
        assert layer.params.get("causal", False) is causal
    # the nodes computing the 4-D mask from the input are the first attention layer's
    assert any(n.startswith("node_GatherND") for n in attentions[0].nodes)


@pytest.mark.parametrize("name", [*MODELS, "hf_bert_mask", "hf_llama_mask"])
def test_run_checks_the_torch_model_against_onnxruntime(hf_models, name: str, tmp_path: Path):
    _checked_against_ort(_run(hf_models[name], tmp_path / "runs", "torch"), ("torch",))


# Triton in the interpreter (slow: a minute or more each on a loaded machine): LLaMA with its
# attention_mask has every piece of the text models (embedding, rope, grouped-query attention
# with causal and padding masks, RMS norm, SwiGLU); ViT the vision ones (patch conv, class
# token concat, layer norm with bias, erf GELU).
@pytest.mark.parametrize("name", ["hf_llama_mask", "hf_vit"])
def test_run_checks_the_triton_model_against_onnxruntime(hf_models, name: str, tmp_path: Path):
    _checked_against_ort(_run(hf_models[name], tmp_path / "runs", "triton"), ("triton",))
