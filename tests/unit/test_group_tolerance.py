"""A fused group's tolerance (spec/model.group_tolerance, WorkItem.tolerance): each output is
checked at the loosest own tolerance of the members its value comes through, the record names
that member, and nothing is looser than one member's own limit. Through `run` on the CPU: an
int8 linear + residual add is checked at int8's tolerance (the add's fp16 one fails a correct
kernel), a plain fp16 group keeps fp16's, and a group that drops its residual still fails."""

from __future__ import annotations

import json

import pytest

from opbench.backends import triton as triton_backend
from opbench.backends.triton_fused import build_fused
from opbench.pipeline import RunOptions, WorkItem, run_suite
from opbench.results.io import run_from_dict, run_to_dict
from opbench.results.model import Status
from opbench.spec.load import load_suite_text
from opbench.spec.model import DEFAULT_TOLERANCE, INT8_TOLERANCE

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")

SUITE = """\
name: t
defaults: {dtype: float16, backends: [torch, triton], timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}}
models:
  - name: res
    inputs: {x: [37, 48], r: [37, 24]}
    fuse: true
    layers:
      - {name: fc, op: linear, out_features: 24, quant: int8, inputs: [x]}
      - {name: back, op: add, inputs: [fc, r]}
      - {name: sum, op: add, inputs: [back, r]}
      - {name: norm, op: rmsnorm}
      - {name: fc2, op: linear, out_features: 24}
      - {name: back2, op: add, inputs: [fc2, sum]}
"""


def model(text: str = SUITE):
    return load_suite_text(text, "t.yaml").models[0]


def item(m, *names: str) -> WorkItem:
    return WorkItem(m, tuple(m.graph.index(n) for n in names), "triton")


def test_the_loosest_member_upstream_of_each_output_applies() -> None:
    m = model()
    found = item(m, "fc", "back").tolerance(m.layers[m.graph.index("back")])
    assert (found.value, found.layer, found.loose) == (INT8_TOLERANCE, "fc", False)
    plain = item(m, "fc2", "back2").tolerance(m.layers[m.graph.index("back2")])
    assert (plain.value, plain.layer) == (DEFAULT_TOLERANCE["float16"], "back2")
    # add → norm: the sum is an output of its own, computed through the add alone.
    group = item(m, "sum", "norm")
    assert [la.name for la in group.extra_outputs] == ["sum"]
    assert group.tolerance(group.extra_outputs[0]).layer == "sum"
    assert group.tolerance(group.output_layer).layer == "norm"  # a tie: the output's own


def test_a_suite_set_tolerance_counts_as_that_members_own() -> None:
    tight = SUITE.replace("quant: int8,", "quant: int8, tolerance: 0.02,")
    m = model(tight)
    found = item(m, "fc", "back").tolerance(m.layers[m.graph.index("back")])
    assert (found.value, found.layer, found.loose) == (0.02, "fc", False)
    loose = SUITE.replace("{name: back, op: add,", "{name: back, op: add, tolerance: 0.05,")
    m = model(loose)
    found = item(m, "fc", "back").tolerance(m.layers[m.graph.index("back")])
    assert (found.value, found.layer, found.loose) == (0.05, "back", True)


@pytest.fixture(scope="module")
def res_run():
    return run_suite(load_suite_text(SUITE, "t.yaml"), RunOptions(quick=True))


def test_a_quantized_member_sets_the_groups_limit(res_run) -> None:
    row = res_run.find("res", "fc", "triton")
    assert row.members == ("fc", "back"), row.members
    assert row.status == Status.OK and row.correct, row.correctness
    c = row.correctness
    assert (c.tolerance, c.tolerance_of, c.loose_tolerance) == (INT8_TOLERANCE, "fc", False)
    # The int8 GEMM's rounding is in the output: ~20x the fp16 group's error here (4.8e-3,
    # at the add's own fp16 limit, which this correct kernel would fail on other data).
    plain = res_run.find("res", "fc2", "triton").correctness
    assert c.rel_l2 > 5 * plain.rel_l2, (c, plain)


def test_a_plain_group_keeps_its_dtypes_limit(res_run) -> None:
    row = res_run.find("res", "fc2", "triton")
    assert row.members == ("fc2", "back2"), row.members
    assert row.correct, row.correctness
    c = row.correctness
    assert (c.tolerance, c.tolerance_of) == (DEFAULT_TOLERANCE["float16"], "back2")
    single = res_run.find("res", "fc", "torch")
    assert single.correctness.tolerance_of is None


def test_the_member_is_kept_in_run_json(res_run) -> None:
    again = run_from_dict(json.loads(json.dumps(run_to_dict(res_run))))
    assert again.find("res", "fc", "triton").correctness.tolerance_of == "fc"
    assert again.find("res", "fc", "torch").correctness.tolerance_of is None


def test_a_group_that_drops_its_residual_still_fails(monkeypatch) -> None:
    """The int8 group's looser limit still catches a wrong kernel: fc's output alone (the
    residual never added) is off by about |r| / |fc + r|, far above int8's 3e-2."""

    def without_residual(layers, weights):
        if [la.op for la in layers] != ["linear", "add"]:
            return build_fused(layers, weights)
        from opbench.backends.base import cast_weights
        from opbench.backends.triton_table import BUILDERS

        alone = BUILDERS["linear"](layers[0], cast_weights(weights[0], layers[0].dtype))
        kernel, note = build_fused(layers, weights)
        kernel.bind = lambda x, r, out=None, extra=(): alone.bind(x)
        return kernel, note

    monkeypatch.setattr(triton_backend, "build_fused", without_residual)
    run = run_suite(load_suite_text(SUITE, "t.yaml"), RunOptions(quick=True, backends=["triton"]))
    row = run.find("res", "fc", "triton")
    assert row.status == Status.WRONG and not row.correct
    assert row.correctness.tolerance == INT8_TOLERANCE
    assert any("(fc's tolerance)" in f for f in row.correctness.failures), row.correctness
