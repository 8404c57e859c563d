"""The triton backend's fusion planner over the graph (backends/triton_fusion.py): which
connected pieces of a model become one kernel, on the shipped networks and on small graphs that
break one condition at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.backends.triton_fusion import fusion_groups, group_kind, plan_fusions
from opbench.spec.load import load_suite, load_suite_text

SUITES = Path(__file__).parents[2] / "suites"


def named(model, kind: str | None = None) -> list[tuple[str, ...]]:
    """The multi-layer groups (of one kind) by layer names."""
    return [
        tuple(model.layers[i].name for i in f.layers)
        for f in plan_fusions(model)
        if len(f.layers) > 1 and (kind is None or f.kind == kind)
    ]


def check_plan(model) -> None:
    """Every layer once, every group connected, and an order the groups can run in."""
    groups = fusion_groups(model)
    assert sorted(i for g in groups for i in g) == list(range(len(model.layers)))
    assert all(model.graph.is_connected(g) for g in groups)
    model.graph.order_groups(groups)  # raises when no order exists
    for fusion in plan_fusions(model):
        assert group_kind([model.layers[i] for i in fusion.layers]) == fusion.kind


def test_resnet50_bottlenecks_fuse_their_tails_and_downsample_branches() -> None:
    model = load_suite(SUITES / "cnn.yaml").models[0]
    check_plan(model)
    groups = named(model)
    assert groups[:4] == [
        ("stem_conv", "stem_bn", "stem_relu"),
        ("l1b0_c1_conv", "l1b0_c1_bn", "l1b0_c1_relu"),
        ("l1b0_c2_conv", "l1b0_c2_bn", "l1b0_c2_relu"),
        ("l1b0_c3_conv", "l1b0_c3_bn", "l1b0_add", "l1b0_relu"),
    ]
    assert ("l1b0_down_conv", "l1b0_down_bn") in groups
    tails = [g for g in groups if len(g) == 4]
    assert len(tails) == 16, "every bottleneck's conv3 → bn3 → add → relu is one kernel"
    assert len(fusion_groups(model)) == 1 + 16 * 3 + 4 + 1 + 3  # conv groups, pool, head


def test_mobilenet_v2_fuses_depthwise_and_projection_with_its_residual() -> None:
    model = load_suite(SUITES / "mobilenet_v2.yaml").models[0]
    check_plan(model)
    groups = named(model)
    assert ("b0_dw_conv", "b0_dw_bn", "b0_dw_relu6") in groups
    assert ("b2_project_conv", "b2_project_bn", "b2_add") in groups
    assert sum(1 for g in groups if g[-1].endswith("_add")) == 10


def test_llama_prefill_adds_both_residuals_in_the_projections() -> None:
    model = load_suite(SUITES / "llama.yaml").models[0]
    check_plan(model)
    assert named(model, "linear_add") == [("o_proj", "attn_res"), ("down", "ffn_res")]
    assert named(model, "add_norm") == [], "both adds are taken by the projections before them"
    # 2048 rows: above SWIGLU_MAX_ROWS the gate takes its silu in its own epilogue instead
    assert named(model, "swiglu") == [] and named(model, "linear_act") == [("gate", "gate_act")]
    # 2048 rows, rotate-half: the warp-specialised GEMM rotates in its epilogue
    assert named(model, "linear_rope") == [("qkv", "rope")]


def test_bert_layer_adds_its_residuals_in_the_projections() -> None:
    model = load_suite(SUITES / "transformer.yaml").models[0]
    check_plan(model)
    assert named(model) == [("attn_out", "attn_res"), ("ffn_down", "ffn_res")]


def test_decode_blocks_take_swiglu_as_one_gemm_at_every_size() -> None:
    for model in load_suite(SUITES / "decode.yaml").models:
        check_plan(model)
        assert named(model, "swiglu") == [("gate", "up", "gate_act", "swiglu")]
        assert named(model, "linear_add") == [("o_proj", "attn_res"), ("down", "ffn_res")]
        # A plain qkv takes the rotation in its GEMM; an int8 one leaves it to rope_append.
        plain = model.layers[model.graph.index("qkv")].quant == "none"
        assert named(model, "linear_rope") == ([("qkv", "rope")] if plain else [])
        assert named(model, "rope_append") == ([] if plain else [("rope", "attn")])


GRAPHS = """\
name: g
defaults: {dtype: float16}
models:
  - name: add_norm
    inputs: {x: [5, 8], r: [5, 8]}
    fuse: true
    layers:
      - {name: sum, op: add, inputs: [x, r]}
      - {name: norm, op: rmsnorm}
      - {name: fc, op: linear, out_features: 8}
      - {name: back, op: add, inputs: [fc, sum]}
  - name: broadcast_add
    inputs: {x: [4, 5, 5], b: [4, 1, 1]}
    fuse: true
    layers:
      - {name: conv, op: conv2d, out_channels: 4, kernel_size: 1, inputs: [x]}
      - {name: add, op: add, inputs: [conv, b]}
      - {name: relu, op: relu}
  - name: shared_bn
    input: [4, 5, 5]
    fuse: true
    layers:
      - {name: conv, op: conv2d, out_channels: 4, kernel_size: 1}
      - {name: bn, op: batchnorm2d}
      - {name: add, op: add, inputs: [bn, input]}
      - {name: side, op: relu, inputs: [bn]}
  - name: gate_activation
    input: [6]
    fuse: true
    layers:
      - {name: up, op: linear, out_features: 10, bias: false}
      - {name: gate, op: linear, out_features: 10, bias: false, activation: silu, inputs: [input]}
      - {name: prod, op: mul, inputs: [up, gate]}
  - name: unequal_projections
    input: [6]
    fuse: true
    layers:
      - {name: gate, op: linear, out_features: 10, activation: silu}
      - {name: up, op: linear, out_features: 10, bias: false, inputs: [input]}
      - {name: prod, op: mul, inputs: [gate, up]}
  - name: mixed_dtypes
    input: [6]
    fuse: true
    layers:
      - {name: fc, op: linear, out_features: 6}
      - {name: res, op: add, inputs: [fc, input], dtype: float32}
  - name: rope_block
    input: [9, 24]
    fuse: true
    layers:
      - {name: attn_norm, op: rmsnorm}
      - {name: qkv, op: linear, out_features: 40, bias: false}
      - {name: rope, op: rope, layout: packed, heads: 3, kv_heads: 1, theta: 500.0}
      - {name: attn, op: attention, heads: 3, kv_heads: 1, causal: true, packed_qkv: true}
      - {name: q, op: linear, out_features: 16, inputs: [attn_norm], quant: int8}
      - {name: q_rope, op: rope, layout: rows, head_dim: 8}
      - {name: k, op: linear, out_features: 16, inputs: [attn_norm], activation: relu}
      - {name: k_rope, op: rope, layout: rows, head_dim: 8}
      - {name: v, op: linear, out_features: 16, inputs: [attn_norm]}
      - {name: v_rope, op: rope, layout: rows, head_dim: 8}
      - {name: v_side, op: relu, inputs: [v]}
  - name: interleaved_prefill
    input: [80, 24]
    fuse: true
    layers:
      - {name: qkv, op: linear, out_features: 40, bias: false}
      - {name: rope, op: rope, layout: packed, heads: 3, kv_heads: 1, style: interleaved}
"""


@pytest.fixture(scope="module")
def graphs():
    suite = load_suite_text(GRAPHS, "g.yaml")
    return {m.name: m for m in suite.models}


def test_add_norm_when_no_projection_can_take_the_add(graphs) -> None:
    model = graphs["add_norm"]
    check_plan(model)
    assert named(model, "add_norm") == [("sum", "norm")]
    assert named(model, "linear_add") == [("fc", "back")]
    assert model.graph.group_outputs((0, 1)) == (0, 1), "the sum is read later: two outputs"


def test_what_does_not_fuse(graphs) -> None:
    assert named(graphs["broadcast_add"]) == [], "a broadcast operand is no residual"
    assert named(graphs["shared_bn"]) == [("conv", "bn")], "bn's output is read twice"
    assert named(graphs["unequal_projections"]) == [], "one has a bias, the other not"
    assert named(graphs["mixed_dtypes"]) == []


def test_a_plain_projection_takes_the_rope_that_alone_reads_it(graphs) -> None:
    model = graphs["rope_block"]
    check_plan(model)
    assert named(model, "linear_rope") == [("qkv", "rope")]
    # Not: an int8 projection, one with an activation, one whose output is read twice.
    assert named(model) == [("qkv", "rope")]
    # Nor the interleaved form above ROPE_MAX_ROWS (80 rows a sequence): no kernel that wins
    # at prefill rotates it.
    assert named(graphs["interleaved_prefill"], "linear_rope") == []


def test_a_gate_with_its_own_silu_pairs_with_up_in_either_order(graphs) -> None:
    model = graphs["gate_activation"]
    check_plan(model)
    assert named(model, "swiglu") == [("up", "gate", "prod")]


def test_nothing_fuses_without_fuse_true() -> None:
    text = (SUITES / "llama.yaml").read_text().replace("fuse: true", "fuse: false")
    model = load_suite_text(text, "llama.yaml").models[0]
    assert fusion_groups(model) == [(i,) for i in range(len(model.layers))]
