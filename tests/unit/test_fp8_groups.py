"""The fp8 linear fed by the layer before it (backends/triton_fusion.py "norm_fp8" and
"glu_fp8"): which layers the planner groups, and the groups through `run` on the CPU, where
the group's result is checked against the float64 reference of the unquantized layers it
covers at the fp8 linear's default tolerance (QUANT_TOLERANCE["fp8"], never loosened), with
poisoned outputs, a second input and the call after timing; and the whole block end to end.
The kernels against the quantized math in float64: tests/kernels/test_fp8_producers.py."""

from __future__ import annotations

import pytest

from opbench.backends.triton_fusion import fusion_groups, group_kind, plan_fusions
from opbench.pipeline import RunOptions, run_suite
from opbench.results.model import Status
from opbench.spec.load import load_suite_text
from opbench.spec.model import QUANT_TOLERANCE

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")

BLOCK = """\
name: g
defaults: {dtype: float16, backends: [torch, triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: block
    inputs: {x: [19, 48]}
    fuse: true
    layers:
      - {name: attn_norm, op: rmsnorm, eps: 1.0e-06}
      - {name: qkv, op: linear, out_features: 80, bias: false, quant: fp8}
      - {name: ln, op: layernorm, inputs: [qkv]}
      - {name: proj, op: linear, out_features: 48, quant: fp8, activation: gelu}
      - {name: gate, op: linear, out_features: 112, bias: false, inputs: [proj]}
      - {name: up, op: linear, out_features: 112, bias: false, inputs: [proj]}
      - {name: gate_act, op: silu, inputs: [gate]}
      - {name: swiglu, op: mul, inputs: [gate_act, up]}
      - {name: down, op: linear, out_features: 48, bias: false, quant: fp8}
      - {name: prod, op: mul, inputs: [down, proj]}
      - {name: out, op: linear, out_features: 32, quant: fp8}
"""


def groups_by_name(model) -> dict[str, tuple[str, ...]]:
    return {
        "+".join(model.layers[i].name for i in f.layers): f.kind
        for f in plan_fusions(model)
        if len(f.layers) > 1
    }


def test_the_planner_feeds_each_fp8_linear_from_the_layer_before() -> None:
    model = load_suite_text(BLOCK, "g.yaml").models[0]
    assert groups_by_name(model) == {
        "attn_norm+qkv": "norm_fp8",
        "ln+proj": "norm_fp8",
        "gate_act+swiglu+down": "glu_fp8",
        "prod+out": "glu_fp8",
    }
    groups = fusion_groups(model)
    assert sorted(i for g in groups for i in g) == list(range(len(model.layers)))
    model.graph.order_groups(groups)
    for fusion in plan_fusions(model):
        assert group_kind([model.layers[i] for i in fusion.layers]) == fusion.kind


def test_what_does_not_feed_an_fp8_linear() -> None:
    text = BLOCK.replace("quant: fp8, activation: gelu", "activation: gelu")  # proj unquantized
    text += "      - {name: side, op: relu, inputs: [gate_act]}\n"
    model = load_suite_text(text, "g.yaml").models[0]
    groups = groups_by_name(model)
    assert "ln+proj" not in groups, "an unquantized linear takes the norm's 16-bit output"
    # gate_act now has two readers (side and the mul): the mul alone feeds down.
    assert groups.get("swiglu+down") == "glu_fp8"
    text = BLOCK.replace(
        "{name: ln, op: layernorm, inputs: [qkv]}",
        "{name: ln, op: layernorm, inputs: [qkv], dtype: float32}",
    )
    assert "ln+proj" not in groups_by_name(load_suite_text(text, "g.yaml").models[0])


@pytest.fixture(scope="module")
def block_run():
    return run_suite(load_suite_text(BLOCK, "g.yaml"), RunOptions(quick=True))


def test_every_group_is_checked_at_the_fp8_tolerance(block_run) -> None:
    fused = [r for r in block_run.layers if r.backend == "triton"]
    members = [r.members for r in fused]
    for group in [("attn_norm", "qkv"), ("ln", "proj"), ("gate_act", "swiglu", "down"),
                  ("prod", "out")]:  # fmt: skip
        assert group in members, members
    for row in fused:
        assert row.status == Status.OK, (row.members, row.message)
        assert row.correct, (row.members, row.correctness)
        if len(row.members) > 1:
            assert row.correctness.tolerance == QUANT_TOLERANCE["fp8"]
            assert not row.correctness.loose_tolerance
            # fp8 is not free: the error is the rounding's, well above fp16's own.
            assert row.correctness.rel_l2 > 5e-3, (row.members, row.correctness)
    model = load_suite_text(BLOCK, "g.yaml").models[0]
    assert sorted(name for m in members for name in m) == sorted(la.name for la in model.layers)


def test_the_block_runs_end_to_end(block_run) -> None:
    rows = [e for e in block_run.end_to_end if e.mode == "eager" and e.backend == "triton"]
    assert rows, "the triton forward ran"
    for row in rows:
        assert row.status == Status.OK and row.correct, row.message
