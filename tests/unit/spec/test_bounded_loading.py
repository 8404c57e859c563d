"""Issue 40's suites that crashed the loader: a layer named `input` that is not the first, a
YAML alias bomb, a suite nested 500 deep. Each is one InputError naming the file (exit 2),
and loading stays small in memory and never recurses past Python's limit."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import ExitCode, InputError
from opbench.spec.load import load_suite, load_suite_text
from opbench.spec.yaml_lines import MAX_DEPTH, MAX_NODES

BAD = Path(__file__).parents[2] / "data" / "suites" / "bad"


def test_a_layer_named_input_after_the_first_is_one_problem_not_a_value_error():
    path = BAD / "input_not_first.yaml"
    with pytest.raises(InputError) as info:
        load_suite(path)
    assert str(info.value) == (
        f"{path}:10:10, model 'm', layer 'input', field 'name': layer name 'input' is also "
        "the name of a model input: a layer reading 'input' could mean either"
    )


def test_an_alias_bomb_is_refused_before_it_expands():
    path = BAD / "alias_bomb.yaml"
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as info:
            load_suite(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(info.value).startswith(f"{path}:")
    assert f"expand to more than {MAX_NODES:,} values" in str(info.value)
    assert peak < 16 * 2**20  # the bomb expands to 9^9 strings; nothing near that is built


def test_aliases_and_merge_keys_within_the_budget_still_load():
    text = (
        "name: s\ndefaults: {dtype: float32, backends: [torch]}\nmodels:\n"
        "  - name: m\n    batch: 2\n    input: [5, 12]\n    layers:\n"
        "      - &fc {name: fc1, op: linear, out_features: 12}\n"
        "      - {<<: *fc, name: fc2}\n"
    )
    suite = load_suite_text(text, "s.yaml")
    assert [layer.name for layer in suite.models[0].layers] == ["fc1", "fc2"]
    assert suite.models[0].layers[1].params["out_features"] == 12


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 5000])
def test_a_suite_nested_deeper_than_the_limit_is_refused_at_its_line(depth: int):
    text = "name: deep\nmodels: " + "[" * depth + "]" * depth + "\n"
    with pytest.raises(InputError) as info:
        load_suite_text(text, "deep.yaml")
    assert str(info.value).startswith("deep.yaml:2:")
    assert f"nested more than {MAX_DEPTH} levels deep" in str(info.value)


@pytest.mark.parametrize("name", ["input_not_first.yaml", "alias_bomb.yaml"])
def test_validate_prints_one_line_and_exits_2(name: str):
    done = CliRunner().invoke(app, ["validate", str(BAD / name)])
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    assert "Traceback" not in done.output
    assert str(BAD / name) in done.output
