"""Baseline files: round trip, run.json accepted as a baseline, errors, updates."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from opbench.compare.baseline import (
    BASELINE_KIND,
    BaselineError,
    baseline_from_run,
    load_baseline,
    update_baseline_file,
    updated_baseline,
    write_baseline,
)
from opbench.compare.gate import gate
from opbench.errors import ExitCode, InputError
from opbench.results.fingerprint import ENV_KEYS, env_differences
from opbench.results.io import write_run
from opbench.results.model import Correctness, LayerResult, RunResult, Status

ENV = {
    "gpu_name": "NVIDIA H200",
    "driver": "570.1",
    "torch": "2.11",
    "triton": "3.6",
    "kernel_version": "abc",
    "opbench_vars": {"OPBENCH_CONV_PLAN": "auto"},
    "plugins": [{"name": "opbench-extra", "version": "0.1"}],
    "hostname": "runner-7",
    "argv": ["run", "suite.yaml"],
    "git_commit": "deadbeef",
}


def layer(name: str, medians=(1.0, 1.02, 0.98), **kw) -> LayerResult:
    values = dict(
        model="mlp",
        layer=name,
        op="linear",
        backend="triton",
        status=Status.OK,
        dtype="float16",
        input_shape=(4, 8),
        output_shape=(4, 8),
        samples_ms=tuple((m * 0.99, m, m * 1.01, m * 1.2) for m in medians),
        correctness=Correctness(rel_l2=1e-4, max_abs=1e-3, nonfinite=0, tolerance=5e-3),
        timer="cuda-events",
    )
    values.update(kw)
    return LayerResult(**values)


def run(*layers, env=ENV, suite="enc") -> RunResult:
    return RunResult(
        suite=suite,
        started_at="20261122T000000Z",
        device="cuda",
        env=env,
        layers=layers,
        complete=True,
    )


def test_round_trip_keeps_what_the_gate_needs(tmp_path):
    source = run(layer("a", regression_threshold=0.08), layer("b"))
    path = tmp_path / "baselines" / "enc.json"
    written = write_baseline(path, source)
    loaded = load_baseline(path)
    assert loaded.source == "baseline" and loaded.suite == "enc" and loaded.path == str(path)
    assert loaded.entries == written.entries
    a = loaded.find(("mlp", "a", "triton"))
    assert a.round_medians_ms == source.layers[0].stats.round_medians
    assert a.median_ms == pytest.approx(source.layers[0].stats.median)
    assert a.cv == pytest.approx(source.layers[0].stats.cv) and a.threshold == 0.08
    assert a.rounds == 3 and a.samples == 12
    assert loaded.code_version == "abc"


def test_file_is_small_and_keeps_only_fingerprint_keys(tmp_path):
    path = tmp_path / "b.json"
    write_baseline(path, run(layer("a")))
    data = json.loads(path.read_text())
    assert data["kind"] == BASELINE_KIND and data["schema_version"] == 1
    assert data["code_version"] == "abc" and data["git_commit"] == "deadbeef"
    assert (
        set(ENV_KEYS) <= set(data["env"])
        and "hostname" not in data["env"]
        and "argv" not in data["env"]
    )
    assert "samples_ms" not in json.dumps(data)  # round medians only, not raw samples


def test_crashed_and_incorrect_layers_are_left_out():
    bad = Correctness(rel_l2=1.0, max_abs=1.0, nonfinite=3, tolerance=5e-3)
    baseline = baseline_from_run(
        run(
            layer("ok"),
            layer("err", status=Status.ERROR, samples_ms=()),
            layer("wrong", correctness=bad),
        )
    )
    assert [e.layer for e in baseline.entries] == ["ok"]


def test_a_run_json_is_accepted_as_a_baseline(tmp_path):
    source = run(layer("a"), layer("b"))
    write_run(source, tmp_path / "run.json")
    for where in (tmp_path / "run.json", tmp_path):
        loaded = load_baseline(where)
        assert loaded.source == "run" and [e.layer for e in loaded.entries] == ["a", "b"]
    report = gate(source, load_baseline(tmp_path))
    assert report.exit_code == 0 and report.baseline_source == "run"


def test_missing_baseline_is_exit_4(tmp_path):
    with pytest.raises(BaselineError) as info:
        load_baseline(tmp_path / "nope.json")
    assert info.value.exit_code == ExitCode.BASELINE == 4
    assert "--update-baseline" in str(info.value) and "nope.json" in str(info.value)


def test_unsupported_schema_is_exit_4_and_garbage_is_exit_2(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(
        json.dumps({"kind": BASELINE_KIND, "schema_version": 99, "suite": "enc", "entries": []})
    )
    with pytest.raises(BaselineError):
        load_baseline(path)
    for text in (
        "{not json",
        "[1, 2]",
        json.dumps({"hello": 1}),
        json.dumps({"kind": BASELINE_KIND, "schema_version": 1}),
    ):
        path.write_text(text)
        with pytest.raises(InputError) as info:
            load_baseline(path)
        assert info.value.exit_code == ExitCode.BAD_INPUT


def test_update_merges_layers_not_remeasured_when_the_environment_matches(tmp_path):
    path = tmp_path / "b.json"
    update_baseline_file(path, run(layer("a"), layer("b")))
    partial = run(layer("b", medians=(2.0, 2.0, 2.0)))
    merged = update_baseline_file(path, partial)
    assert sorted(e.layer for e in merged.entries) == ["a", "b"]
    b = load_baseline(path).find(("mlp", "b", "triton"))
    assert b.round_medians_ms == partial.layers[0].stats.round_medians
    moved = update_baseline_file(path, run(layer("b"), env=dict(ENV, driver="580")))
    assert [e.layer for e in moved.entries] == ["b"]  # another environment: replaced, not mixed


def test_updated_baseline_drops_the_old_timing_of_a_layer_that_now_crashes():
    old = baseline_from_run(run(layer("a"), layer("b")))
    new = updated_baseline(run(layer("b", status=Status.ERROR, samples_ms=())), old)
    assert [e.layer for e in new.entries] == ["a"]


def test_env_differences_rules():
    same = env_differences(ENV, dict(ENV, hostname="elsewhere", git_commit="other"))
    assert same == []  # only the fingerprint keys count
    diffs = env_differences(
        dict(ENV, triton="3.7"), {k: v for k, v in ENV.items() if k != "driver"}
    )
    assert [(d.key, str(d)) for d in diffs] == [
        ("driver", "driver: (not recorded) -> 570.1"),
        ("triton", "triton: 3.6 -> 3.7"),
    ]
    cpu = {k: None for k in ENV_KEYS}
    assert env_differences(cpu, dict(cpu)) == []  # None on both sides is equal
    assert env_differences(ENV, replace_kernel(ENV), ignore=("kernel_version",)) == []


def replace_kernel(env):
    return dict(env, kernel_version="def")


def test_baseline_entries_keep_interpreted_flag():
    baseline = baseline_from_run(run(replace(layer("a"), interpreted=True)))
    assert baseline.entries[0].interpreted
