"""Shipped plan tables: looked up by GPU model, capability and Triton release; `choose` takes
a shipped plan before tuning (and tunes what the table lacks); `opbench plans tune --from`
writes a table from a run's plans; tuning needs a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.kernels import shipped_plans, tuning
from opbench.kernels.gemm.linear_plans import gemm_plan

TAG = "NVIDIA H100 80GB HBM3|sm90|triton-3.6.0"
PLAN = gemm_plan("tma", 128, 256, 64, 8, 3, persistent=True)
OTHER = gemm_plan("tiled", 64, 64, 64, 4, 4)


def write_table(folder: Path, plans: dict, **fields) -> Path:
    path = shipped_plans.table_path("NVIDIA H100 80GB HBM3", folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = {"opbench_shipped_plans": 1, "device": "NVIDIA H100 80GB HBM3",
             "capability": "sm90", "triton": "3.6.0", "command": "test", "plans": plans}  # fmt: skip
    table.update(fields)
    path.write_text(json.dumps(table))
    shipped_plans._table.cache_clear()
    return path


def test_lookup_matches_gpu_capability_and_triton_minor(tmp_path: Path) -> None:
    assert shipped_plans.table_path("NVIDIA H100 80GB HBM3", tmp_path).name == (
        "NVIDIA_H100_80GB_HBM3.json"
    )
    write_table(tmp_path, {"linear|k1": {"config": PLAN.to_json()}})
    found = shipped_plans.lookup(TAG, "linear", "k1", tmp_path)
    assert found and tuning.Config.from_json(found["config"]) == PLAN
    assert shipped_plans.lookup(TAG.replace("3.6.0", "3.6.2"), "linear", "k1", tmp_path)
    assert shipped_plans.lookup(TAG.replace("3.6.0", "3.7.0"), "linear", "k1", tmp_path) is None
    assert shipped_plans.lookup(TAG.replace("sm90", "sm80"), "linear", "k1", tmp_path) is None
    assert shipped_plans.lookup(TAG, "linear", "k2", tmp_path) is None
    assert shipped_plans.lookup("NVIDIA H200|sm90|triton-3.6.0", "linear", "k1", tmp_path) is None


def test_choose_takes_the_shipped_plan_and_tunes_only_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(shipped_plans, "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setattr(tuning, "device_tag", lambda device: TAG)
    write_table(tmp_path / "shipped", {"linear|shipped-key": {"config": OTHER.to_json()}})
    tuning.clear_memory()
    timed = []

    def make_call(config):
        timed.append(config)
        return lambda: None

    monkeypatch.setattr(tuning, "_tune", lambda kernel, cands, make: (cands[0], []))
    choice = tuning.choose("linear", "shipped-key", [PLAN, OTHER], "cuda", make_call)
    assert choice.source == "shipped" and choice.config == OTHER
    choice = tuning.choose("linear", "new-key", [PLAN, OTHER], "cuda", make_call)
    assert choice.source == "tuned"
    tuning.clear_memory()
    monkeypatch.setenv(tuning.NO_SHIPPED_ENV, "1")
    assert (
        tuning.choose("linear", "shipped-key", [PLAN, OTHER], "cuda", make_call).source == "tuned"
    )
    tuning.clear_memory()


def test_merge_keeps_this_gpus_entries_and_replaces_another_release(tmp_path: Path) -> None:
    path = write_table(tmp_path, {"linear|old": {"config": OTHER.to_json()}})
    merged = shipped_plans.merge_table(path, TAG, {"linear|new": {"config": PLAN.to_json()}}, "c")
    assert set(merged["plans"]) == {"linear|old", "linear|new"} and merged["command"] == "c"
    assert merged["commands"] == ["test", "c"], "what the kept table covered is still named"
    newer = TAG.replace("3.6.0", "3.7.1")
    replaced = shipped_plans.merge_table(
        path, newer, {"linear|new": {"config": PLAN.to_json()}}, "c"
    )
    assert set(replaced["plans"]) == {"linear|new"} and replaced["triton"] == "3.7.1"
    assert replaced["commands"] == ["c"], "a replaced table's history goes with it"


def test_plans_tune_from_a_plan_file_writes_the_table(tmp_path: Path) -> None:
    choice = {"kernel": "linear", "key": "k1", "device": TAG, "config": PLAN.to_json(),
              "source": "tuned"}  # fmt: skip
    fixed = {**choice, "key": "k2", "source": "fixed"}
    plans = {"opbench_plans": 1, "plans": [
        {"model": "m", "layer": "a", "backend": "triton", "plan": {"choices": [choice, fixed]}}]}  # fmt: skip
    source = tmp_path / "plans.json"
    source.write_text(json.dumps(plans))
    result = CliRunner().invoke(
        app, ["plans", "tune", "--from", str(source), "--out", str(tmp_path / "t")]
    )
    assert result.exit_code == 0, result.output
    table = json.loads(
        shipped_plans.table_path("NVIDIA H100 80GB HBM3", tmp_path / "t").read_text()
    )
    assert list(table["plans"]) == ["linear|k1"], "fixed choices need no table"
    assert table["device"] == "NVIDIA H100 80GB HBM3" and table["capability"] == "sm90"
    shipped_plans._table.cache_clear()


def test_plans_tune_needs_a_gpu_or_plans(tmp_path: Path) -> None:
    import torch

    runner = CliRunner()
    result = runner.invoke(app, ["plans", "tune"])
    assert result.exit_code == 2 and "give suites" in result.output
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: tuning would run")
    suite = Path(__file__).parents[2] / "suites" / "quickstart.yaml"
    result = runner.invoke(app, ["plans", "tune", str(suite), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "needs a GPU" in result.output


def test_tune_suites_binds_every_triton_layer_and_collects_its_choices() -> None:
    """The walk `opbench plans tune` runs, on the CPU (interpreter: every choice is fixed, so
    nothing lands in a table, but every Triton layer is built and bound once)."""
    from opbench.pipeline.tune_only import tune_suites
    from opbench.spec.load import load_suite_text

    suite = load_suite_text(
        "name: t\ndefaults: {dtype: float16, backends: [torch]}\nmodels:\n  - name: m\n"
        "    batch: 3\n    input: [32]\n    layers:\n"
        "      - {name: a, op: linear, out_features: 32, quant: fp8}\n"
        "      - {name: b, op: linear, out_features: 16, quant: int4-weight, group_size: 16}\n"
        "      - {name: c, op: linear, out_features: 16, dtype: float32, quant: int8-weight,"
        " input: [32]}\n",
        "t.yaml",
    )
    report = tune_suites([suite], "cpu")
    assert report.layers == 2, report.skipped
    assert [name for name, _ in report.skipped] == ["t/m/c"]
    assert "float16/bfloat16" in report.skipped[0][1]
    kernels = {c["kernel"] for c in report.choices}
    assert kernels == {"linear_fp8", "linear_int4_weight"}
    assert all(c["device"] == "interpreter" and c["source"] == "fixed" for c in report.choices)
