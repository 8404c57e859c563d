"""timing.target_ci and the adaptive budgets: settable per suite, model and layer."""

from __future__ import annotations

import pytest

from opbench.errors import InputError
from opbench.spec.load import load_suite_text
from opbench.spec.model import TimingSpec

SUITE = """
name: t
defaults:
  timing: {target_ci: 0.02, max_ms: 400}
models:
  - name: m
    input: [8]
    timing: {min_ms: 50}
    layers:
      - {name: a, op: relu}
      - {name: b, op: relu, timing: {target_ci: 0.005}}
      - {name: c, op: relu, timing: {rounds: 5, rep_ms: 100}}
"""


def test_adaptive_settings_merge_field_by_field() -> None:
    (model,) = load_suite_text(SUITE).models
    a, b, c = (layer.timing for layer in model.layers)
    assert a == TimingSpec(target_ci=0.02, min_ms=50, max_ms=400)
    assert a.adaptive
    assert b.target_ci == 0.005 and (b.min_ms, b.max_ms) == (50, 400)
    assert not c.adaptive and (c.rounds, c.rep_ms) == (5, 100), "a fixed schedule stays one"


def test_the_default_is_adaptive_to_one_percent() -> None:
    spec = TimingSpec()
    assert spec.adaptive and spec.target_ci == 0.01 and spec.min_ms <= spec.max_ms


@pytest.mark.parametrize("bad", ["target_ci: 0", "target_ci: 1.5", "max_ms: 0", "min_ms: -1"])
def test_bad_adaptive_settings_are_input_errors(bad: str) -> None:
    text = SUITE.replace("timing: {min_ms: 50}", "timing: {" + bad + "}")
    with pytest.raises(InputError):
        load_suite_text(text)
