"""Issue 40's CI gate cases, through `opbench compare --baseline`:

- fewer rounds than a verdict needs (two `--quick` runs of the same code, 2 rounds each, with
  an offset between the runs): INCONCLUSIVE, said so, exit 0; never REGRESSED;
- `--backend` limits the gate to that backend; without it every backend is gated;
- the ms columns are what the ratio is made of (geometric means of round medians), so the
  ratio agrees with them; an interval past x1000 is printed as unbounded.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from test_gate_cli import gate, layer, save

from opbench.compare.baseline import baseline_from_run
from opbench.compare.gate import gate as gate_run
from opbench.compare.gate_model import MIN_ROUNDS, format_interval
from opbench.errors import ExitCode
from opbench.report.style import fmt_ms
from opbench.results.io import read_run


def rounds_of(medians, scale=1.0):
    return tuple((m * scale * 0.98, m * scale, m * scale * 1.03) for m in medians)


def test_two_quick_rounds_are_inconclusive_never_regressed(tmp_path: Path):
    # The same code, run twice with --quick: tight rounds, an offset of x1.47 between runs.
    base = save(tmp_path, "b", layer("ln", samples_ms=rounds_of((0.100, 0.1001))))
    run = save(tmp_path, "r", layer("ln", samples_ms=rounds_of((0.147, 0.1471))))
    done = gate(str(run), "--baseline", str(base))
    assert done.exit_code == ExitCode.OK, done.output
    assert "REGRESSED" not in done.output
    assert "gate: INCONCLUSIVE" in done.output
    assert f"a verdict needs {MIN_ROUNDS}+ timing rounds on each side" in done.output
    assert "(baseline 2, run 2)" in done.output


def test_the_gate_judges_the_chosen_backend_only(tmp_path: Path):
    base = save(tmp_path, "b", layer("fc1"), layer("fc1", backend="torch"))
    run = save(tmp_path, "r", layer("fc1"), layer("fc1", backend="torch", scale=1.5))
    every = gate(str(run), "--baseline", str(base))
    assert every.exit_code == ExitCode.FAILED_GATE, every.output  # torch regressed: gated
    chosen = gate(str(run), "--baseline", str(base), "--backend", "triton")
    assert chosen.exit_code == ExitCode.OK, chosen.output
    assert "torch" not in chosen.output.split("regression gate")[1]
    absent = gate(str(run), "--baseline", str(base), "--backend", "torch-int8")
    assert absent.exit_code == ExitCode.BAD_INPUT, absent.output
    assert "no result of backend torch-int8 in this run" in absent.output


def test_compare_help_says_what_the_gate_judges_by_default():
    done = gate("--help")
    text = " ".join(done.output.replace("│", " ").split())
    assert "without --backend the gate judges every backend" in text


def test_the_ratio_agrees_with_the_ms_it_shows(tmp_path: Path):
    # Round medians whose geometric mean is far from the median of all samples.
    base_medians = (0.30, 0.31, 0.60, 0.61, 0.62)
    run_medians = (1.17, 1.18, 1.16, 1.19, 1.17)
    base = save(tmp_path, "b", layer("act", samples_ms=rounds_of(base_medians)))
    run = save(tmp_path, "r", layer("act", samples_ms=rounds_of(run_medians)))
    (v,) = gate_run(read_run(run), baseline_from_run(read_run(base))).verdicts
    geo = math.exp(sum(map(math.log, base_medians)) / 5)
    assert v.baseline_gm_ms == pytest.approx(geo)
    assert v.ratio == pytest.approx(v.current_gm_ms / v.baseline_gm_ms)
    done = gate(str(run), "--baseline", str(base))
    row = next(line for line in done.output.splitlines() if " act " in line)
    assert fmt_ms(v.baseline_gm_ms) in row and fmt_ms(v.current_gm_ms) in row
    assert f"{v.ratio:.3f}" in row
    assert "geometric mean of the round medians, what the ratio compares" in done.output


def test_an_interval_past_x1000_is_printed_as_unbounded(tmp_path: Path):
    assert format_interval(0.0, 1.77e22) == "unbounded"
    assert format_interval(0.5, math.inf) == "unbounded"
    assert format_interval(0.981, 1.034) == "0.981-1.034"
    wild = (0.01, 30.0, 0.02, 50.0, 0.015)
    base = save(tmp_path, "b", layer("fc1", samples_ms=rounds_of(wild)))
    run = save(tmp_path, "r", layer("fc1", samples_ms=rounds_of(wild[::-1], 1.3)))
    done = gate(str(run), "--baseline", str(base))
    row = next(line for line in done.output.splitlines() if " fc1 " in line)
    assert "unbounded" in row
    assert not re.search(r"\d{7,}", done.output)  # no 17713106791809666777088.000
