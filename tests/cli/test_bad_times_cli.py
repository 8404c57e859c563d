"""Times no call can take reach neither a verdict nor a traceback: `compare` against a
reference and the gate against a baseline each refuse the run (or the baseline) in one
located line with exit code 2. Before, 0 or negative samples gave "∞× PASS" and 1e308 a
traceback or a REGRESSED verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_gate_cli import gate, layer, save

from opbench.errors import ExitCode

BAD = [((0.0, 0.0, 0.0),) * 5, ((-1.0, -1.0, -1.0),) * 5, ((1e308, 1e308, 1e308),) * 5]


@pytest.mark.parametrize("samples", BAD, ids=["zero", "negative", "1e308"])
def test_compare_and_gate_refuse_a_run_with_impossible_samples(tmp_path: Path, samples):
    good = save(tmp_path, "good", layer("fc1"))
    bad = save(tmp_path, "bad", layer("fc1", samples_ms=samples))
    reference = tmp_path / "ref.csv"
    reference.write_text("layer,time_ms\nfc1,3.0\n")
    for args in (
        [str(bad), "--reference", str(reference)],
        [str(bad), "--baseline", str(good)],
        [str(good), "--baseline", str(bad)],
    ):
        done = gate(*args)
        assert done.exit_code == ExitCode.BAD_INPUT, done.output
        assert "samples_ms round 1, sample 1" in done.output
        assert "PASS" not in done.output and "Traceback" not in done.output


@pytest.mark.parametrize("median", [0.0, -1.0, 1e308, "nan"])
def test_the_gate_refuses_a_baseline_file_with_impossible_medians(tmp_path: Path, median):
    run = save(tmp_path, "run", layer("fc1"))
    baseline = tmp_path / "base.json"
    assert gate(str(run), "--baseline", str(baseline), "--update-baseline").exit_code == 0
    data = json.loads(baseline.read_text())
    data["entries"][0].update(round_medians_ms=[median] * 5, median_ms=median)
    baseline.write_text(json.dumps(data))
    done = gate(str(run), "--baseline", str(baseline))
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    assert "entry mlp/fc1/triton: a round median of" in done.output
    assert "PASS" not in done.output and "Traceback" not in done.output
