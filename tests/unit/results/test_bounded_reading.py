"""Issue 40's files that crashed the readers: a run.json nested 100,000 deep, a run.json whose
result says `backend: null`, a --map nested 1000 deep. Each is one InputError naming the file
(exit 2), never a RecursionError or an AttributeError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opbench.compare.baseline import load_baseline
from opbench.errors import ExitCode, InputError
from opbench.match.namemap import read_name_map
from opbench.results.io import read_run, write_run
from opbench.results.model import Correctness, EndToEnd, LayerResult, RunResult


def small_run() -> RunResult:
    layer = LayerResult(
        model="m", layer="fc1", op="linear", backend="triton", status="ok", dtype="float32",
        input_shape=(2, 5), output_shape=(2, 3), samples_ms=((0.031, 0.029, 0.030),),
        correctness=Correctness(rel_l2=2e-7, max_abs=3e-7, nonfinite=0, tolerance=1e-4),
    )  # fmt: skip
    e2e = EndToEnd(model="m", backend="triton", status="ok", samples_ms=((0.05, 0.052),))
    return RunResult(
        suite="s", started_at="2026-11-28T00:00:00Z", device="cuda", layers=(layer,),
        end_to_end=(e2e,), complete=True,
    )  # fmt: skip


@pytest.mark.parametrize("reader", [read_run, load_baseline], ids=["run", "baseline"])
def test_a_run_json_nested_100000_deep_is_bad_input(tmp_path: Path, reader):
    path = tmp_path / "run.json"
    path.write_text('{"suite": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputError) as info:
        reader(path)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert str(info.value).startswith(f"{path}: ")
    assert "nested too deep" in str(info.value)


@pytest.mark.parametrize(
    ("where", "field", "said"),
    [
        ("layers", "backend", "layers[0]: 'backend' is null, not text"),
        ("layers", "model", "layers[0]: 'model' is 3, not text"),
        ("end_to_end", "status", "end_to_end[0]: 'status' is null, not text"),
        (None, "suite_spec", "the run: 'suite_spec' is not an object"),
    ],
)
@pytest.mark.parametrize("reader", [read_run, load_baseline], ids=["run", "baseline"])
def test_a_result_field_of_the_wrong_kind_is_named(tmp_path: Path, reader, where, field, said):
    path = tmp_path / "run.json"
    write_run(small_run(), path)
    data = json.loads(path.read_text())
    target = data[where][0] if where else data
    target[field] = 3 if field == "model" else ([] if field == "suite_spec" else None)
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        reader(path)
    assert str(info.value).startswith(f"{path}: ")
    assert said in str(info.value)


def test_a_map_nested_1000_deep_is_bad_input(tmp_path: Path):
    path = tmp_path / "names.yaml"
    path.write_text("fc1: " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(InputError) as info:
        read_name_map(path)
    assert str(info.value).startswith(f"{path}:1:")
    assert "nested more than" in str(info.value)


def test_a_plans_file_nested_too_deep_is_bad_input(tmp_path: Path):
    from opbench.pipeline.plans import read_plans

    path = tmp_path / "plans.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError) as info:
        read_plans(path)
    assert str(info.value).startswith(f"{path}, field '--plans': ")
    assert "nested too deep" in str(info.value)
