"""`opbench compare RUN --baseline BASE`, the CI regression gate, through the real Typer app:
every exit code, the baseline file written by --update-baseline, JUnit's schema, the GitHub
step summary and annotations, and Bencher Metric Format.

Runs are hand-made so their round medians, and so the verdicts, are known exactly; one test
goes through `opbench run` on the CPU for real."""

from __future__ import annotations

import json
import statistics
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.errors import ExitCode
from opbench.results.io import new_run_dir, point_latest, read_run, write_run
from opbench.results.model import Correctness, LayerResult, RunResult, Status

REPO = Path(__file__).resolve().parents[2]
ENV = {
    "gpu_name": "NVIDIA H200",
    "driver": "580.159.04",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "kernel_version": "k1",
}
ROUND_MEDIANS = (1.0, 1.004, 0.996, 1.002, 0.998)  # CV 0.3%: any 50% change is unambiguous

runner = CliRunner()


def layer(name: str, scale: float = 1.0, backend: str = "triton", **kw) -> LayerResult:
    rounds = tuple((m * scale * 0.99, m * scale, m * scale * 1.01) for m in ROUND_MEDIANS)
    values = dict(
        model="mlp",
        layer=name,
        op="linear",
        backend=backend,
        status=Status.OK,
        dtype="float16",
        input_shape=(8, 64),
        output_shape=(8, 64),
        samples_ms=rounds,
        correctness=Correctness(rel_l2=1e-4, max_abs=1e-3, nonfinite=0, tolerance=5e-3),
        timer="cuda-events",
    )
    values.update(kw)
    return LayerResult(**values)


def save(tmp_path: Path, name: str, *layers: LayerResult, env=ENV) -> Path:
    """A run folder reports/demo/<name>/ holding run.json."""
    run = RunResult(
        suite="demo",
        started_at="2026-11-23T00:00:00Z",
        device="cuda",
        env=dict(env),
        layers=layers,
        complete=True,
    )
    folder = new_run_dir(tmp_path / "reports", "demo", name)
    write_run(run, folder / "run.json")
    point_latest(folder)
    return folder


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return save(tmp_path, "base", layer("fc1"), layer("fc2"), layer("fc1", backend="torch"))


def gate(*args: str, env: dict | None = None):
    return runner.invoke(app, ["compare", *args], env=env)


def test_same_timings_pass_with_exit_0(tmp_path: Path, base: Path):
    same = save(tmp_path, "same", layer("fc1"), layer("fc2"), layer("fc1", backend="torch"))
    done = gate(str(same), "--baseline", str(base))
    assert done.exit_code == ExitCode.OK, done.output
    assert "REGRESSED" not in done.output
    assert done.output.count("OK") >= 3


def test_a_slowed_layer_exits_1_and_is_named(tmp_path: Path, base: Path):
    slow = save(
        tmp_path, "slow", layer("fc1"), layer("fc2", scale=1.5), layer("fc1", backend="torch")
    )
    done = gate(str(slow), "--baseline", str(base))
    assert done.exit_code == ExitCode.FAILED_GATE, done.output
    regressed = [line for line in done.output.splitlines() if "REGRESSED" in line]
    assert any("fc2" in line for line in regressed), done.output
    assert not any("fc1" in line for line in regressed)


def test_improvements_are_reported_and_never_fail(tmp_path: Path, base: Path):
    fast = save(
        tmp_path, "fast", layer("fc1", scale=0.5), layer("fc2"), layer("fc1", backend="torch")
    )
    done = gate(str(fast), "--baseline", str(base))
    assert done.exit_code == ExitCode.OK, done.output
    assert "IMPROVED" in done.output


def test_threshold_option_widens_the_band(tmp_path: Path, base: Path):
    slower = save(
        tmp_path, "s", layer("fc1"), layer("fc2", scale=1.10), layer("fc1", backend="torch")
    )
    assert gate(str(slower), "--baseline", str(base)).exit_code == ExitCode.FAILED_GATE
    done = gate(str(slower), "--baseline", str(base), "--threshold", "20%")
    assert done.exit_code == ExitCode.OK, done.output


def test_a_crashed_layer_exits_3(tmp_path: Path, base: Path):
    crashed = layer(
        "fc2", status=Status.ERROR, samples_ms=(), message="RuntimeError: boom", correctness=None
    )
    run = save(tmp_path, "crash", layer("fc1"), crashed, layer("fc1", backend="torch"))
    done = gate(str(run), "--baseline", str(base))
    assert done.exit_code == ExitCode.LAYER_ERROR, done.output


def test_failed_correctness_exits_3(tmp_path: Path, base: Path):
    wrong = Correctness(rel_l2=0.5, max_abs=3.0, nonfinite=0, tolerance=5e-3)
    run = save(
        tmp_path,
        "wrong",
        layer("fc1"),
        layer("fc2", correctness=wrong),
        layer("fc1", backend="torch"),
    )
    assert gate(str(run), "--baseline", str(base)).exit_code == ExitCode.LAYER_ERROR


def test_missing_baseline_exits_4(tmp_path: Path, base: Path):
    done = gate(str(base), "--baseline", str(tmp_path / "nowhere.json"))
    assert done.exit_code == ExitCode.BASELINE, done.output


def test_another_environment_is_incomparable_exit_4_unless_allowed(tmp_path: Path, base: Path):
    other = dict(ENV, driver="590.1", triton="3.7.0")
    slow = save(
        tmp_path,
        "other",
        layer("fc1"),
        layer("fc2", scale=1.5),
        layer("fc1", backend="torch"),
        env=other,
    )
    done = gate(str(slow), "--baseline", str(base))
    assert done.exit_code == ExitCode.BASELINE, done.output
    assert "driver" in done.output and "triton" in done.output
    assert "REGRESSED" not in done.output
    allowed = gate(str(slow), "--baseline", str(base), "--allow-env-change")
    assert allowed.exit_code == ExitCode.FAILED_GATE, allowed.output


@pytest.mark.parametrize("threshold", ["abc", "-5%", "150%x"])
def test_bad_threshold_is_bad_input_and_writes_nothing(tmp_path: Path, base: Path, threshold):
    junit = tmp_path / "junit.xml"
    done = gate(str(base), "--baseline", str(base), "--threshold", threshold, "--junit", str(junit))
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    assert "Traceback" not in done.output
    assert not junit.exists()


def test_nothing_to_compare_is_bad_input(base: Path):
    done = gate(str(base))
    assert done.exit_code == ExitCode.BAD_INPUT
    assert "--baseline" in done.output


def test_update_baseline_writes_a_small_file_that_then_gates(tmp_path: Path, base: Path):
    path = tmp_path / "baselines" / "demo.json"
    done = gate(str(base), "--update-baseline", "--baseline-out", str(path))
    assert done.exit_code == ExitCode.OK, done.output
    data = json.loads(path.read_text())
    assert len(json.dumps(data)) < 20_000
    text = json.dumps(data)
    for key in ENV:
        assert key in text
    same = save(tmp_path, "again", layer("fc1"), layer("fc2"), layer("fc1", backend="torch"))
    assert gate(str(same), "--baseline", str(path)).exit_code == ExitCode.OK
    slow = save(
        tmp_path, "slow", layer("fc1", scale=1.5), layer("fc2"), layer("fc1", backend="torch")
    )
    assert gate(str(slow), "--baseline", str(path)).exit_code == ExitCode.FAILED_GATE


def test_update_baseline_over_a_missing_one_does_not_fail(tmp_path: Path, base: Path):
    path = tmp_path / "new.json"
    done = gate(str(base), "--baseline", str(path), "--update-baseline")
    assert done.exit_code == ExitCode.OK, done.output
    assert path.is_file()


def test_junit_schema(tmp_path: Path, base: Path):
    crashed = layer(
        "fc3", status=Status.ERROR, samples_ms=(), message="RuntimeError: boom", correctness=None
    )
    base_with_fc3 = save(
        tmp_path, "b3", layer("fc1"), layer("fc2"), layer("fc3"), layer("fc1", backend="torch")
    )
    run = save(
        tmp_path,
        "r3",
        layer("fc1", scale=0.5),
        layer("fc2", scale=1.5),
        crashed,
        layer("fc1", backend="torch"),
    )
    junit = tmp_path / "out" / "junit.xml"
    done = gate(str(run), "--baseline", str(base_with_fc3), "--junit", str(junit))
    assert done.exit_code == ExitCode.LAYER_ERROR, done.output  # a crash outranks a regression
    root = ET.parse(junit).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    assert suites, "no <testsuite>"
    cases = list(root.iter("testcase"))
    # one per (layer, backend), and one for the environment check
    assert len(cases) == 5
    assert any(c.get("name") == "environment" for c in cases)
    for suite in suites:
        counted = list(suite.iter("testcase"))
        assert int(suite.get("tests")) == len(counted)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in counted)
        assert int(suite.get("errors")) == sum(c.find("error") is not None for c in counted)
    by_name = {c.get("name"): c for c in cases}
    assert all(c.get("classname") for c in cases)

    def case(fragment: str, backend: str = "triton") -> ET.Element:
        (found,) = [c for n, c in by_name.items() if fragment in n and backend in n]
        return found

    assert case("fc2").find("failure") is not None
    assert case("fc3").find("error") is not None
    assert case("fc1").find("failure") is None and case("fc1").find("error") is None
    names = {p.get("name") for p in case("fc2").iter("property")}
    assert {"ratio"} <= names or any("ratio" in n for n in names), names
    assert any("ci" in n or "low" in n for n in names), names


def test_step_summary_and_annotations_in_github_actions(tmp_path: Path, base: Path):
    slow = save(
        tmp_path, "slow", layer("fc1"), layer("fc2", scale=1.5), layer("fc1", backend="torch")
    )
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTIONS": "true"}
    done = gate(str(slow), "--baseline", str(base), env=env)
    assert done.exit_code == ExitCode.FAILED_GATE
    text = summary.read_text()
    assert text.startswith("# earlier step\n"), "the summary must be appended to, not replaced"
    assert "fc2" in text and "|" in text
    errors = [line for line in done.output.splitlines() if line.startswith("::error")]
    assert errors and any("fc2" in line for line in errors), done.output


def test_no_annotations_outside_github_actions(tmp_path: Path, base: Path):
    slow = save(tmp_path, "slow", layer("fc2", scale=1.5))
    done = gate(str(slow), "--baseline", str(base), env={"GITHUB_ACTIONS": ""})
    assert "::error" not in done.output


def test_bmf_export(tmp_path: Path, base: Path):
    path = tmp_path / "bmf.json"
    done = gate(str(base), "--baseline", str(base), "--bmf", str(path))
    assert done.exit_code == ExitCode.OK, done.output
    data = json.loads(path.read_text())
    assert set(data) == {"demo/mlp/fc1/triton", "demo/mlp/fc2/triton", "demo/mlp/fc1/torch"}
    for measures in data.values():
        ((_slug, metric),) = measures.items()
        assert metric["lower_value"] <= metric["value"] <= metric["upper_value"]
        assert metric["value"] == pytest.approx(1.0, rel=0.01)


def test_gate_and_target_in_one_command(tmp_path: Path, base: Path):
    """--baseline with --reference: the exit code is the more important of the two."""
    ref = tmp_path / "ref.csv"
    ref.write_text("layer,time_ms\nfc1,3.0\nfc2,3.0\n")  # 3x slower than opbench: target met
    same = save(tmp_path, "same", layer("fc1"), layer("fc2"), layer("fc1", backend="torch"))
    both = gate(str(same), "--reference", str(ref), "--baseline", str(base))
    assert both.exit_code == ExitCode.OK, both.output
    slow = save(
        tmp_path, "slow", layer("fc1"), layer("fc2", scale=1.5), layer("fc1", backend="torch")
    )
    both = gate(str(slow), "--reference", str(ref), "--baseline", str(base))
    assert both.exit_code == ExitCode.FAILED_GATE, both.output
    tight = tmp_path / "tight.csv"
    tight.write_text("layer,time_ms\nfc1,1.0\nfc2,1.0\n")  # target missed, no regression
    missed = gate(str(same), "--reference", str(tight), "--baseline", str(base))
    assert missed.exit_code == ExitCode.FAILED_GATE, missed.output
    env_changed = save(
        tmp_path, "env", layer("fc1"), layer("fc2"), env=dict(ENV, gpu_name="NVIDIA H100")
    )
    code = gate(str(env_changed), "--reference", str(tight), "--baseline", str(base)).exit_code
    assert code == ExitCode.BASELINE  # 4 outranks 1


def test_confirm_without_a_gpu_keeps_the_first_verdict_and_says_why(tmp_path: Path):
    noisy_medians = (1.0, 1.3, 0.75, 1.25, 0.8)
    noisy = tuple((m * 0.99, m, m * 1.01) for m in noisy_medians)
    base = save(tmp_path, "b", layer("fc1", samples_ms=noisy))
    shifted = tuple(tuple(v * 1.08 for v in r) for r in noisy)
    run = save(tmp_path, "r", layer("fc1", samples_ms=shifted))
    done = gate(str(run), "--baseline", str(base), "--confirm")
    assert done.exit_code == ExitCode.OK, done.output  # inconclusive warns, never fails
    assert "INCONCLUSIVE" in done.output
    assert "--confirm could not" in done.output


def test_cpu_run_end_to_end_gates_against_its_own_baseline(tmp_path: Path):
    """opbench run on the CPU, --update-baseline, then the same run and a doctored copy with one
    layer 5x slower: 10 rounds give intervals narrow enough on a CPU's noise to call that."""
    out = tmp_path / "reports"
    suite = REPO / "tests" / "data" / "suites" / "tiny.yaml"
    ran = runner.invoke(
        app,
        [
            "run",
            str(suite),
            "--device",
            "cpu",
            "--backend",
            "torch",
            "--out",
            str(out),
            "--rounds",
            "10",
        ],
    )
    assert ran.exit_code == 0, ran.output
    run_json = out / "tiny" / "latest" / "run.json"
    baseline = tmp_path / "baseline.json"
    made = gate(str(run_json), "--update-baseline", "--baseline-out", str(baseline))
    assert made.exit_code == ExitCode.OK, made.output
    assert gate(str(run_json), "--baseline", str(baseline)).exit_code == ExitCode.OK

    run = read_run(run_json)

    def spread(result: LayerResult) -> float:
        medians = [statistics.median(r) for r in result.samples_ms]
        return max(medians) / min(medians)

    # The steadiest layer: a CPU shared with other work makes some layers' rounds wander.
    first = min(run.layers, key=spread)
    slowed = replace(first, samples_ms=tuple(tuple(v * 5 for v in r) for r in first.samples_ms))
    slow_dir = tmp_path / "slow"
    slow_dir.mkdir()
    layers = tuple(slowed if r.key == first.key else r for r in run.layers)
    write_run(replace(run, layers=layers), slow_dir / "run.json")
    done = gate(str(slow_dir), "--baseline", str(baseline))
    assert done.exit_code == ExitCode.FAILED_GATE, done.output
    assert first.layer in "".join(line for line in done.output.splitlines() if "REGRESSED" in line)
