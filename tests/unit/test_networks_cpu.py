"""The shipped networks' structures, shrunk, through `run` on the CPU with torch and triton (the
Triton interpreter): every layer and fused group correct against float64, and the whole model
correct end to end. Built by suites/networks.py's own builders, so the graphs are the shipped
ones (residual blocks with downsample branches, inverted residuals with depthwise convs and
relu6, post-norm BERT, pre-norm LLaMA with RoPE, GQA and SwiGLU, its decode step with the KV-cache append) at sizes the interpreter runs in seconds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from opbench.pipeline.options import RunOptions
from opbench.pipeline.run import run_suite
from opbench.results.model import Status
from opbench.spec.load import load_suite_text

SUITES = Path(__file__).parents[2] / "suites"
spec = importlib.util.spec_from_file_location("networks", SUITES / "networks.py")
networks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(networks)


def tiny_suite() -> str:
    n = networks
    models = [
        n.model_text("resnet", {"batch": 1, "input": [3, 32, 32], "fuse": True},
                     n.resnet50(blocks=(2, 1, 1, 1), width=4, image=32, classes=5)),
        # divide=16: the narrowest with MobileNetV2's every kind of block (1-channel
        # projections), two blocks a stage at most (the first, then one with the residual):
        # its depthwise convs are what the interpreter spends its time on.
        n.model_text("mobilenet", {"batch": 1, "input": [3, 32, 32], "fuse": True},
                     n.mobilenet_v2(divide=16, image=32, classes=5, max_repeats=2)),
        n.model_text("bert", {"batch": 2, "input": [7, 32], "fuse": True},
                     n.bert_layer(hidden=32, heads=2, ffn=40)),
        n.model_text("llama", {"batch": 1, "input": [9, 32], "fuse": True},  # LLaMA-3's GQA
                     n.llama_prefill_block(hidden=32, heads=2, ffn=48, kv_heads=1,
                                           theta=500000.0)),
        n.model_text("decode", {"batch": 3, "inputs": {"x": [1, 32]}, "fuse": True},
                     n.llama_decode_block(None, hidden=32, ffn=48, heads=2, kv_heads=1,
                                          kv_len=11)),
    ]  # fmt: skip
    defaults = {"dtype": "float32", "backends": ["torch", "triton"],
                "timing": {"warmup_ms": 0, "rep_ms": 1, "rounds": 1}}  # fmt: skip
    return n.suite_text("tiny networks", "tiny_networks", "tiny", defaults, models)


@pytest.fixture(scope="module")
def run():
    suite = load_suite_text(tiny_suite(), "tiny_networks.yaml")
    return run_suite(suite, RunOptions(quick=True))


@pytest.mark.parametrize("model", ["resnet", "mobilenet", "bert", "llama", "decode"])
def test_every_layer_and_the_whole_model_is_correct(run, model) -> None:
    results = [r for r in run.layers if r.model == model]
    bad = [(r.backend, r.members, r.status, r.message) for r in results if not r.correct]
    assert not bad, bad
    fused = [r.members for r in results if r.backend == "triton" and len(r.members) > 1]
    assert fused, "the triton backend fused nothing"
    rows = [e for e in run.end_to_end if e.model == model and e.mode == "eager"]
    assert {e.backend for e in rows} == {"torch", "triton"}
    for row in rows:
        assert row.status == Status.OK, row.message
        assert row.correctness is not None and row.correctness.passed, row.correctness


def test_the_fusions_that_make_the_networks_fast(run) -> None:
    fused = {(r.model, r.members) for r in run.layers if r.backend == "triton"}
    assert ("resnet", ("l1b0_c3_conv", "l1b0_c3_bn", "l1b0_add", "l1b0_relu")) in fused
    assert ("mobilenet", ("b2_project_conv", "b2_project_bn", "b2_add")) in fused
    assert ("mobilenet", ("b1_dw_conv", "b1_dw_bn", "b1_dw_relu6")) in fused
    assert ("bert", ("attn_out", "attn_res")) in fused
    assert ("llama", ("gate", "up", "gate_act", "swiglu")) in fused
    assert ("decode", ("down", "ffn_res")) in fused
    # The rotation in the qkv GEMM's epilogue; the decode step's attention appends k and v.
    assert ("llama", ("qkv", "rope")) in fused
    assert ("decode", ("qkv", "rope")) in fused
