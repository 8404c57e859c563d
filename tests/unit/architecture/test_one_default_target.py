"""The default target speed-up is written once (opbench/targets.py) and every stage reads it."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from opbench.compare.model import ModelSummary
from opbench.results.model import LayerResult
from opbench.spec.load import load_suite
from opbench.targets import DEFAULT_TARGET_SPEEDUP

PACKAGE = Path(__file__).resolve().parents[3] / "opbench"
SUITES = Path(__file__).resolve().parents[2] / "data" / "suites"


def test_spec_results_and_compare_share_the_default() -> None:
    (model,) = load_suite(SUITES / "builtin_defaults.yaml").models
    assert {layer.target_speedup for layer in model.layers} == {DEFAULT_TARGET_SPEEDUP}
    assert {f.name: f.default for f in fields(LayerResult)}["target_speedup"] == (
        DEFAULT_TARGET_SPEEDUP
    )
    assert {f.name: f.default for f in fields(ModelSummary)}["target"] == DEFAULT_TARGET_SPEEDUP


def _names_a_target(name: str) -> bool:
    lower = name.lower()
    return lower == "target" or "target_speedup" in lower or lower.startswith("default_target")


def _literal_target_defaults(path: Path) -> list[str]:
    """Assignments of a number literal to a target speed-up (a field default `target` or
    `target_speedup`, or a DEFAULT_TARGET* constant): the ways the default used to be written
    again. `target_ci` (a confidence width) is another thing."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        number = isinstance(value, ast.Constant) and isinstance(value.value, float)
        if number and any(_names_a_target(name) for name in names):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_no_module_but_targets_writes_the_number() -> None:
    found = [
        hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _literal_target_defaults(path)
    ]
    assert found == ["opbench/targets.py:10"]
