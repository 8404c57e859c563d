"""Plans that reproduce (`opbench run --plans` / `--plans-out`), end to end on the CPU.

Under the interpreter nothing is timed, so every plan is the fixed choice; the round trip must
hand back exactly the recorded configurations, a hand-edited configuration must be the one
that runs, and a plan recorded for another shape must be tuned again, with a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.kernels.tuning import PlanMismatch
from opbench.results.io import read_run, resolve_latest

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0")

SUITE = """
name: plans
defaults:
  dtype: float16
  backends: [triton]
  timing: {warmup_ms: 0, rep_ms: 1, rounds: 1}
models:
  - name: mlp
    batch: 2
    input: [5, 24]
    layers:
      - {name: ln, op: layernorm}
      - {name: fc, op: linear, out_features: 20, activation: relu}
      - {name: sm, op: softmax}
  - name: cnn
    batch: 1
    input: [18, 6, 5]
    layers:
      - {name: conv, op: conv2d, out_channels: 8, kernel_size: 3, padding: 1}
"""


def invoke(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def run(tmp_path: Path, name: str, *extra) -> tuple[object, dict]:
    suite = tmp_path / "plans.yaml"
    suite.write_text(SUITE)
    out = tmp_path / name
    result = invoke("run", suite, "--out", out, "--device", "cpu", *extra)
    layers = read_run(resolve_latest(out / "plans")).layers
    return result, {(r.model, r.layer): r.plan for r in layers}


def configs(plans: dict) -> dict:
    return {key: [(c["kernel"], c["key"], c["config"]) for c in plan["choices"]]
            for key, plan in plans.items()}  # fmt: skip


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, object, dict]:
    """One run that records its plans (`--plans-out`), shared by the tests that reuse them:
    its folder (plans.json, the run under a/), its result and its plans."""
    folder = tmp_path_factory.mktemp("recorded")
    result, plans = run(folder, "a", "--plans-out", folder / "plans.json")
    return folder, result, plans


def test_round_trip_reproduces_the_recorded_configurations(recorded, tmp_path: Path) -> None:
    folder, first, recorded_plans = recorded
    assert first.exit_code == 0, first.output
    assert set(recorded_plans) == {("mlp", "ln"), ("mlp", "fc"), ("mlp", "sm"), ("cnn", "conv")}
    assert all(c["source"] == "fixed" for p in recorded_plans.values() for c in p["choices"])
    plan_file = json.loads((folder / "plans.json").read_text())
    assert plan_file["opbench_plans"] == 1 and len(plan_file["plans"]) == 4

    second, reused = run(tmp_path, "b", "--plans", folder / "plans.json")
    assert second.exit_code == 0, second.output
    assert configs(reused) == configs(recorded_plans)
    assert all(c["source"] == "reused" for p in reused.values() for c in p["choices"])

    # A run.json serves as the plan file too.
    third, from_run = run(tmp_path, "c", "--plans", resolve_latest(folder / "a" / "plans"))
    assert third.exit_code == 0 and configs(from_run) == configs(recorded_plans)


def test_an_edited_configuration_is_the_one_that_runs(recorded, tmp_path: Path) -> None:
    data = json.loads((recorded[0] / "plans.json").read_text())
    (fc,) = [p for p in data["plans"] if p["layer"] == "fc"]
    meta = fc["plan"]["choices"][0]["config"]["meta"]
    assert meta["SPLIT_K"] == 1
    meta["SPLIT_K"] = 3  # a split-K plan the interpreter would not pick by itself
    (tmp_path / "edited.json").write_text(json.dumps(data))
    result, plans = run(tmp_path, "b", "--plans", tmp_path / "edited.json")
    assert result.exit_code == 0, result.output  # still correct against float64
    (choice,) = plans[("mlp", "fc")]["choices"]
    assert choice["source"] == "reused" and choice["config"]["meta"]["SPLIT_K"] == 3


def test_a_plan_for_another_shape_is_tuned_again_with_a_warning(recorded, tmp_path: Path) -> None:
    data = json.loads((recorded[0] / "plans.json").read_text())
    for entry in data["plans"]:
        if entry["layer"] == "sm":
            entry["plan"]["choices"][0]["key"] += "-other-shape"
    (tmp_path / "stale.json").write_text(json.dumps(data))
    with pytest.warns(PlanMismatch, match="softmax: plan recorded for"):
        result, plans = run(tmp_path, "b", "--plans", tmp_path / "stale.json")
    assert result.exit_code == 0, result.output
    (choice,) = plans[("mlp", "sm")]["choices"]
    assert choice["source"] == "retuned" and "other-shape" in choice["note"]
    assert "plan not reused for mlp/sm/triton" in result.output
    assert plans[("mlp", "fc")]["choices"][0]["source"] == "reused"


def test_a_bad_plan_file_is_bad_input(tmp_path: Path) -> None:
    suite = tmp_path / "plans.yaml"
    suite.write_text(SUITE)
    (tmp_path / "bad.json").write_text("{not json")
    result = invoke("run", suite, "--device", "cpu", "--out", tmp_path, "--plans",
                    tmp_path / "bad.json")  # fmt: skip
    assert result.exit_code == 2 and "not valid JSON" in result.output
    assert "Traceback" not in result.output
    missing = invoke("run", suite, "--device", "cpu", "--out", tmp_path, "--plans",
                     tmp_path / "nope.json")  # fmt: skip
    assert missing.exit_code == 2 and "cannot read the plans" in missing.output


def test_a_run_folder_given_as_plans_is_read_once(recorded, monkeypatch) -> None:
    """`--plans RUN` hands the run both the plans and the wall seconds of its results, from one
    read of the run.json (it was parsed four times)."""
    from opbench.pipeline.plans import read_plans

    folder, _, plans = recorded
    run_json = resolve_latest(folder / "a" / "plans") / "run.json"
    reads = []
    original = Path.read_text

    def counted(self: Path, *args, **kwargs) -> str:
        reads.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    recorded_plans = read_plans(run_json.parent)
    assert reads == [run_json]
    assert recorded_plans.plans == {(m, la, "triton"): p for (m, la), p in plans.items() if p}
    assert set(recorded_plans.plans) <= set(recorded_plans.costs)
    assert all(seconds > 0 for seconds in recorded_plans.costs.values())
