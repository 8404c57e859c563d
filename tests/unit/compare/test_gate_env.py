"""The gate compares runs measured the same way only (issue 29, case 8): other CPU threads,
another timer (CUDA events or graph replays) or another schedule (fixed rounds or the stopping
rule) is an environment change, refused (exit 4) unless --allow-env-change, and named in the
report either way."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_gate import ENV, layer
from test_gate import run as gate_run
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.compare.baseline import (
    FIXED_ROUNDS,
    STOPPING_RULE,
    baseline_from_dict,
    baseline_from_run,
    baseline_to_dict,
)
from opbench.compare.gate import GateOptions, Verdict, gate
from opbench.errors import ExitCode
from opbench.results.io import new_run_dir, write_run
from opbench.results.model import LayerResult, RunResult


def timed(**kw) -> LayerResult:
    """test_gate's layer, timed by the stopping rule unless told otherwise."""
    return layer(**{"stop_reason": "target_ci", **kw})


def run(*layers: LayerResult, threads: int = 8) -> RunResult:
    return gate_run(*layers, env={**ENV, "threads": threads})


def differences(report) -> list[tuple[str, object, object]]:
    return [(d.key, d.baseline, d.current) for d in report.env_differences]


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        (run(timed(), threads=4), [("threads", 8, 4)]),
        (run(timed(timer="cuda-graph")), [("timer (1 layer(s))", "cuda-events", "cuda-graph")]),
        (
            run(timed(stop_reason="rounds")),
            [("schedule (1 layer(s))", STOPPING_RULE, FIXED_ROUNDS)],
        ),
    ],
    ids=["threads", "timer", "schedule"],
)
def test_a_run_measured_another_way_is_refused_and_named(current, expected):
    baseline = baseline_from_run(run(timed()))
    refused = gate(current, baseline)
    assert differences(refused) == expected
    assert refused.incomparable and refused.exit_code == ExitCode.BASELINE
    assert {v.verdict for v in refused.verdicts} == {Verdict.INCOMPARABLE}
    allowed = gate(current, baseline, GateOptions(allow_env_change=True))
    assert differences(allowed) == expected  # still named in the report
    assert not allowed.incomparable and allowed.exit_code == ExitCode.OK


def test_the_same_measurement_is_comparable_and_survives_the_baseline_file():
    baseline = baseline_from_dict(baseline_to_dict(baseline_from_run(run(timed()))))
    assert baseline.env["threads"] == 8 and baseline.entries[0].schedule == STOPPING_RULE
    report = gate(run(timed()), baseline)
    assert report.env_differences == () and report.exit_code == ExitCode.OK


def test_a_baseline_that_did_not_record_the_schedule_cannot_show_it_is_comparable():
    data = baseline_to_dict(baseline_from_run(run(timed())))
    for entry in data["entries"]:
        del entry["schedule"]
    report = gate(run(timed()), baseline_from_dict(data))
    assert differences(report) == [("schedule (1 layer(s))", "(not recorded)", STOPPING_RULE)]
    assert report.exit_code == ExitCode.BASELINE


def test_compare_refuses_other_threads_unless_allowed_and_says_so(tmp_path: Path):
    def save(name: str, threads: int) -> Path:
        folder = new_run_dir(tmp_path / "reports", "s", name)
        write_run(run(timed(), threads=threads), folder / "run.json")
        return folder

    base, current = save("base", 8), save("current", 4)
    runner = CliRunner()
    refused = runner.invoke(app, ["compare", str(current), "--baseline", str(base)])
    assert refused.exit_code == ExitCode.BASELINE, refused.output
    words = " ".join(refused.output.split())  # the table title may wrap
    assert "environment differs from the baseline: comparison refused" in words
    assert "│ threads │ 8" in refused.output
    allowed = runner.invoke(
        app, ["compare", str(current), "--baseline", str(base), "--allow-env-change"]
    )
    assert allowed.exit_code == ExitCode.OK, allowed.output
    words = " ".join(allowed.output.split())
    assert "compared anyway (--allow-env-change)" in words and "│ threads │ 8" in allowed.output
