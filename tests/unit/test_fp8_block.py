"""A tiny LLaMA-like fp8 block (`fuse: true`) through `run` on the CPU: the norm before q, k, v
(and before gate and up) writes its e4m3 codes once for every fp8 linear that reads it (a
group with several outputs), the out-projection and the down projection add their residual
in the fp8 GEMM's epilogue (the down projection after SwiGLU's product quantized by the row
quantizer: glu_fp8 + add). Every group checked against the float64 reference of the
unquantized layers it covers at the fp8 linear's default tolerance, each of a multi-output
group's outputs too (a wrong one fails); the whole block end to end. Kernels:
tests/kernels/test_fp8_code_readers.py."""

from __future__ import annotations

import pytest

from opbench.backends import triton as triton_backend
from opbench.backends.triton_fused import build_fused
from opbench.backends.triton_fusion import fusion_groups, group_kind, plan_fusions
from opbench.pipeline import RunOptions, run_suite
from opbench.results.model import Status
from opbench.spec.load import load_suite_text
from opbench.spec.model import QUANT_TOLERANCE
from tests.unit.test_fp8_groups import groups_by_name

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")

BLOCK = """\
name: b
defaults: {dtype: float16, backends: [torch, triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: llama_fp8
    input: [19, 48]
    fuse: true
    layers:
      - {name: attn_norm, op: rmsnorm, eps: 1.0e-06}
      - {name: q, op: linear, out_features: 48, bias: false, quant: fp8}
      - {name: k, op: linear, out_features: 48, bias: false, quant: fp8, inputs: [attn_norm]}
      - {name: v, op: linear, out_features: 48, bias: false, quant: fp8, inputs: [attn_norm]}
      - {name: attn, op: attention, heads: 3, causal: true, separate_qkv: true, inputs: [q, k, v]}
      - {name: o_proj, op: linear, out_features: 48, bias: false, quant: fp8}
      - {name: attn_res, op: add, inputs: [o_proj, input]}
      - {name: ffn_norm, op: rmsnorm, eps: 1.0e-06, inputs: [attn_res]}
      - {name: gate, op: linear, out_features: 80, bias: false, quant: fp8}
      - {name: up, op: linear, out_features: 80, bias: false, quant: fp8, inputs: [ffn_norm]}
      - {name: gate_act, op: silu, inputs: [gate]}
      - {name: swiglu, op: mul, inputs: [gate_act, up]}
      - {name: down, op: linear, out_features: 48, bias: false, quant: fp8}
      - {name: ffn_res, op: add, inputs: [down, attn_res]}
"""
GROUPS = {
    "attn_norm+q+k+v": "norm_fp8",
    "o_proj+attn_res": "linear_add",
    "ffn_norm+gate+up": "norm_fp8",
    "gate_act+swiglu+down+ffn_res": "glu_fp8",
}


def test_the_planner_shares_each_norms_codes_and_adds_each_residual() -> None:
    model = load_suite_text(BLOCK, "b.yaml").models[0]
    assert groups_by_name(model) == GROUPS
    groups = fusion_groups(model)
    model.graph.order_groups(groups)
    for fusion in plan_fusions(model):
        assert group_kind([model.layers[i] for i in fusion.layers]) == fusion.kind


def test_a_norm_with_a_reader_that_is_not_fp8_stays_apart() -> None:
    text = BLOCK.replace("{name: q, op: linear, out_features: 48, bias: false, quant: fp8}",
                         "{name: q, op: linear, out_features: 48, bias: false}")  # fmt: skip
    groups = groups_by_name(load_suite_text(text, "b.yaml").models[0])
    assert not any(g.startswith("attn_norm") for g in groups), groups
    assert groups["ffn_norm+gate+up"] == "norm_fp8"
    # One fp8 reader: the norm → linear group of before, with the residual add after it.
    one = BLOCK.replace("inputs: [q, k, v]}", "inputs: [q, q, q]}")
    one = "\n".join(line for line in one.splitlines() if "name: k," not in line
                    and "name: v," not in line) + "\n"  # fmt: skip
    text = one.replace("{name: o_proj, op: linear, out_features: 48, bias: false, quant: fp8}",
                       "{name: o_proj, op: linear, out_features: 48, bias: false, quant: fp8, "
                       "inputs: [ffn_norm2]}")  # fmt: skip
    text = text.replace("      - {name: o_proj,",
                        "      - {name: ffn_norm2, op: rmsnorm, inputs: [attn]}\n"
                        "      - {name: o_proj,")  # fmt: skip
    groups = groups_by_name(load_suite_text(text, "b.yaml").models[0])
    assert groups["attn_norm+q"] == "norm_fp8"
    assert groups["ffn_norm2+o_proj+attn_res"] == "norm_fp8"


@pytest.fixture(scope="module")
def block_run():
    return run_suite(load_suite_text(BLOCK, "b.yaml"), RunOptions(quick=True))


def test_every_group_is_checked_at_its_fp8_members_tolerance(block_run) -> None:
    model = load_suite_text(BLOCK, "b.yaml").models[0]
    fused = {"+".join(r.members): r for r in block_run.layers if r.backend == "triton"}
    assert set(GROUPS) <= set(fused), list(fused)
    for name, row in fused.items():
        assert row.status == Status.OK, (name, row.message)
        assert row.correct, (name, row.correctness)
        if name in GROUPS:
            c = row.correctness
            assert c.tolerance == QUANT_TOLERANCE["fp8"] and not c.loose_tolerance, (name, c)
            assert model.layers[model.graph.index(c.tolerance_of)].quant == "fp8", c
            assert c.rel_l2 > 5e-3, (name, c)  # the fp8 rounding is in it


def test_the_block_runs_end_to_end(block_run) -> None:
    rows = [e for e in block_run.end_to_end if e.mode == "eager" and e.backend == "triton"]
    assert rows, "the triton forward ran"
    for row in rows:
        assert row.status == Status.OK and row.correct, (row.message, row.correctness)


def test_a_wrong_extra_output_fails(monkeypatch) -> None:
    """The multi-output group whose k output is overwritten after the launch: the group's
    check of its other outputs fails it (at fp8's tolerance, and named)."""

    def wrong_k(layers, weights):
        kernel, note = build_fused(layers, weights)
        if "k" not in kernel.extra_names:
            return kernel, note
        bind = kernel.bind
        at = kernel.extra_names.index("k")

        def bind_wrong(*xs, **kw):
            from dataclasses import replace

            bound = bind(*xs, **kw)
            launch = bound.launch

            def launch_wrong():
                out = launch()
                bound.extra[at].mul_(1.25)
                return out

            return replace(bound, launch=launch_wrong)

        kernel.bind = bind_wrong
        return kernel, note

    monkeypatch.setattr(triton_backend, "build_fused", wrong_k)
    run = run_suite(load_suite_text(BLOCK, "b.yaml"), RunOptions(quick=True, backends=["triton"]))
    row = run.find("llama_fp8", "attn_norm", "triton")
    assert row.members == ("attn_norm", "q", "k", "v")
    assert row.status == Status.WRONG and not row.correct, row.correctness
    assert any(f.startswith("output 'k': rel_l2") for f in row.correctness.failures), row


def test_linears_group_only_in_quantizations_the_builders_take() -> None:
    """fp8 gate and up read from the block's input (no norm): not one SwiGLU GEMM (its kernel
    has no fp8 form) but silu in the fp8 gate's epilogue, or, with an fp8 down projection,
    the product quantized for it; a weight-only linear's add runs apart rather than as a
    group no builder makes."""
    text = """\
name: q
defaults: {dtype: float16, backends: [triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: m
    input: [19, 48]
    fuse: true
    layers:
      - {name: gate, op: linear, out_features: 80, bias: false, quant: fp8}
      - {name: up, op: linear, out_features: 80, bias: false, quant: fp8, inputs: [input]}
      - {name: gate_act, op: silu, inputs: [gate]}
      - {name: swiglu, op: mul, inputs: [gate_act, up]}
      - {name: down, op: linear, out_features: 48, bias: false, quant: int8-weight}
      - {name: res, op: add, inputs: [down, input]}
"""
    model = load_suite_text(text, "q.yaml").models[0]
    assert groups_by_name(model) == {"gate+gate_act": "linear_act"}
    run = run_suite(load_suite_text(text, "q.yaml"), RunOptions(quick=True, end_to_end=False))
    row = run.find("m", "gate", "triton")
    assert row.members == ("gate", "gate_act") and row.status == Status.OK, row.message
    assert row.correct and row.correctness.tolerance_of == "gate", row.correctness
    fp8_down = text.replace("quant: int8-weight", "quant: fp8")
    model = load_suite_text(fp8_down, "q.yaml").models[0]
    assert groups_by_name(model) == {"gate_act+swiglu+down+res": "glu_fp8"}
