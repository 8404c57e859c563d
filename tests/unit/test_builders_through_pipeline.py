"""Every Triton builder of backends/triton_table.py, through run_suite on the interpreter, checks and
all: the real kernels (nothing swapped for torch, unlike test_pipeline.py), small odd shapes,
each dtype path and the int8 and fp8 ones, grouped-query and KV-cache attention, and a fused conv → batchnorm → relu group.

Every result must pass every check at the suite's default tolerances: first call, second
input, and the call after timing, with the element-wise limit too.
"""

from __future__ import annotations

import pytest

from opbench.backends import triton as triton_backend
from opbench.ops.registry import OPS
from opbench.pipeline import RunOptions, run_suite
from opbench.results.model import Status
from opbench.spec.load import load_suite_text

SUITE = """
name: builders
defaults: {backends: [triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: mlp
    batch: 3
    input: [5, 24]
    layers:
      - {name: ln, op: layernorm, dtype: float32}
      - {name: fc, op: linear, out_features: 40, activation: gelu, dtype: float32}
      - {name: fc16, op: linear, out_features: 24, dtype: float16}
      - {name: fc8, op: linear, out_features: 33, quant: int8, dtype: float16}
      - {name: rms, op: rmsnorm, dtype: bfloat16}
      - {name: act, op: silu, dtype: bfloat16}
      - {name: probs, op: softmax, dtype: float16}
  - name: cnn
    batch: 2
    input: [3, 7, 5]
    layers:
      - {name: conv, op: conv2d, out_channels: 8, kernel_size: 3, padding: 1, dtype: float32}
      - {name: bn, op: batchnorm2d, dtype: float32}
      - {name: relu, op: relu, dtype: float32}
      - {name: maxp, op: maxpool2d, kernel_size: 3, stride: 2, padding: 1, dtype: float16}
      - {name: conv8, op: conv2d, out_channels: 16, kernel_size: 3, padding: 1, quant: int8, dtype: float16}
      - {name: avgp, op: avgpool2d, kernel_size: 2, dtype: float16}
      - {name: nhwc, op: permute, dims: [0, 2, 3, 1], dtype: float16}
      - {name: flat, op: flatten, dtype: float16}
      - {name: gelu, op: gelu, dtype: float16}
  - name: fused
    batch: 1
    input: [4, 7, 5]
    fuse: true
    layers:
      - {name: conv, op: conv2d, out_channels: 6, kernel_size: 3, padding: 1, dtype: float16}
      - {name: bn, op: batchnorm2d, dtype: float16}
      - {name: relu, op: relu, dtype: float16}
  - name: attn
    batch: 2
    input: [19, 96]
    dtype: float16
    layers:
      - {name: causal, op: attention, heads: 2, packed_qkv: true, causal: true}
      - {name: int8, op: attention, heads: 2, packed_qkv: true, causal: false, quant: int8, input: [19, 96]}
      - {name: fp8, op: attention, heads: 1, packed_qkv: true, causal: true, quant: fp8, input: [19, 96]}
      - {name: gqa, op: attention, heads: 4, kv_heads: 2, packed_qkv: true, causal: true, input: [19, 128]}
      - {name: decode, op: attention, heads: 4, kv_heads: 1, kv_len: 300, causal: true, input: [3, 64]}
      - {name: swap, op: transpose, dims: [1, 2], input: [19, 32]}
  - name: qkv
    batch: 2
    inputs: {q: [3, 64], k: [37, 32], v: [37, 32], x: [37, 32]}
    dtype: float16
    layers:
      - {name: decode, op: attention, heads: 4, kv_heads: 2, causal: true, separate_qkv: true, inputs: [q, k, v]}
      - {name: self, op: attention, heads: 2, causal: true, separate_qkv: true, inputs: [x, k, v]}
"""


def example_models(suite: str) -> str:
    """One model per Triton builder that the hand-written models above leave out, built from
    its op's own `example` (ops/<op>.py): a new op is covered without editing this file."""
    used = {
        layer.op
        for model in load_suite_text(suite, "builders.yaml").models
        for layer in model.layers
    }
    models = []
    for op in sorted(set(triton_backend.BUILDERS) - used):
        example = OPS[op].example
        assert example is not None, f"op {op!r} has a Triton builder and no example"
        models.append(example.suite_model(f"example_{op}", op, op, extra=", dtype: float16"))
    return "".join(models)


@pytest.fixture(scope="module")
def run():
    suite = load_suite_text(SUITE + example_models(SUITE), "builders.yaml")
    return run_suite(suite, RunOptions(device="cpu"))


def test_the_suite_covers_every_builder(run) -> None:
    ops = {op for layer in run.layers for op in layer.op.split("+")}
    assert ops >= set(triton_backend.BUILDERS), set(triton_backend.BUILDERS) - ops
    fused = [layer for layer in run.layers if "+" in layer.op]
    assert [r.op for r in fused] == ["conv2d+batchnorm2d+relu"]


def test_every_builder_passes_every_check(run) -> None:
    assert run.layers and all(r.interpreted for r in run.layers)
    for r in run.layers:
        assert r.status == Status.OK, f"{r.model}/{r.layer}: {r.message}"
        corr = r.correctness
        assert corr.failures == (), f"{r.model}/{r.layer}: {corr.failures}"
        assert corr.unwritten == 0 and corr.nonfinite == 0
        assert corr.max_abs_limit is not None and corr.max_abs <= corr.max_abs_limit
        assert not corr.loose_tolerance, "the suite keeps every dtype's default tolerance"
        assert r.correct, f"{r.model}/{r.layer}: {corr}"
