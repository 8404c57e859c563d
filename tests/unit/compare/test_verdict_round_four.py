"""Issue 40's wrong verdicts 1 and 3, each on a fixture of tests/data/reference:

1. an activation written inside a layer (`activation: relu` on a linear) covers the ReLU a
   SAS `fc` + Relu row holds: no doubt, the clear PASS stands;
3. a reference time of 0, or one cut off mid-number, makes the row UNCERTAIN and the model
   UNCERTAIN too: it is never judged against a total that counts the 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from verdict_helpers import cli_compare, compare_file, rows_of, run_of

from opbench.compare.model import Verdict
from opbench.errors import ExitCode

MLP = (
    # name, op, output shape, reference_name, triton ms
    ("fc1", "linear", (4, 16), None, 0.040),
    ("fc2", "linear", (4, 8), None, 0.030),
)


def mlp_run(fc1_activation: str):
    """The MLP with fc1 applying `fc1_activation` itself, as run.json's suite spec records."""
    run = run_of(MLP, model="mlp")
    params = {"fc1": {"out_features": 16, "activation": fc1_activation}, "fc2": {}}
    for layer in run.suite_spec["models"][0]["layers"]:
        layer["params"] = {"activation": "none", **params[layer["name"]]}
    return run


def test_an_activation_inside_the_layer_covers_the_rows_fused_relu():
    rows = rows_of(compare_file(mlp_run("relu"), "sas_fc_relu_fused.csv"))
    fc1 = rows[("fc1",)]
    assert fc1.ambiguity is None
    assert fc1.primary.verdict == Verdict.PASS  # 0.141 / 0.040 = 3.5x, clear of 1.5
    assert fc1.primary.speedup.lo == pytest.approx(0.141 / 0.040)


def test_another_activation_inside_the_layer_leaves_the_relu_unaccounted():
    fc1 = rows_of(compare_file(mlp_run("gelu"), "sas_fc_relu_fused.csv"))[("fc1",)]
    assert fc1.primary.verdict == Verdict.UNCERTAIN
    assert "no relu layer follows fc1" in fc1.primary.reason


CNN = (
    ("conv2d_1", "conv2d", (1, 8, 32, 32), None, 0.300),
    ("pool1", "maxpool2d", (1, 8, 16, 16), None, 0.020),
    ("fc1", "linear", (1, 10), None, 0.100),
)


@pytest.mark.parametrize(
    ("fixture", "no_time", "judged"),
    [("sas_zero_time.csv", "pool1", "fc1"), ("sas_cut_mid_number.csv", "fc1", "pool1")],
)
def test_a_reference_time_of_zero_leaves_row_and_model_uncertain(fixture, no_time, judged):
    c = compare_file(run_of(CNN), fixture)
    rows = rows_of(c)
    assert rows[(no_time,)].primary.verdict == Verdict.UNCERTAIN
    assert rows[(no_time,)].reference is None
    assert rows[(judged,)].primary.verdict in Verdict.JUDGED
    (model,) = c.models
    # Every other row is below target: judged on the sum with a 0 in it, the model was FAIL.
    assert model.verdict == Verdict.UNCERTAIN
    assert f"the reference has no time for {no_time}" in model.reason
    assert model.basis == "rows measured on both sides"


def test_a_zero_reference_time_gives_the_exit_code_of_the_rows_verdicts(tmp_path: Path):
    done = cli_compare(tmp_path, run_of(CNN), "sas_zero_time.csv")
    # conv2d_1 (0.302 / 0.300) and fc1 miss the target: exit 1 follows those FAIL rows
    assert done.exit_code == ExitCode.FAILED_GATE, done.output
    assert "Traceback" not in done.output
