"""The shipped suites: every one loads, and the generated networks match their script."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from opbench.spec.load import load_suite

SUITES = Path(__file__).parents[3] / "suites"


def networks():
    spec = importlib.util.spec_from_file_location("networks", SUITES / "networks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(SUITES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_suite_loads(path: Path) -> None:
    suite = load_suite(path)
    assert suite.models
    if path.name not in networks().SUITES:
        return  # op suites: independent layers, each its own piece (warned about, on purpose)
    assert not suite.warnings, [str(w) for w in suite.warnings]  # whole networks, one piece


def test_generated_suites_are_what_the_script_writes() -> None:
    module = networks()
    for file, make in module.SUITES.items():
        assert (SUITES / file).read_text() == make(), f"run python3 suites/networks.py ({file})"


def test_resnet50_is_whole() -> None:
    model = load_suite(SUITES / "cnn.yaml").models[0]
    ops = [layer.op for layer in model.layers]
    assert ops.count("conv2d") == 53 and ops.count("add") == 16  # 49 in blocks + 4 down + stem
    assert model.graph.outputs == (len(model.layers) - 1,)
    assert model.layers[-1].output_shape == (1, 1000)
