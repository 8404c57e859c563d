"""Issue 40: `--out` that is an existing file, or a folder that cannot be created, is bad input
for `run` (found before any device or measure work) and `compare`: one line naming the folder
and the problem, exit 2, never NotADirectoryError / FileExistsError / FileNotFoundError."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import opbench.pipeline
from opbench.cli.main import app
from opbench.errors import ExitCode
from opbench.results.io import write_run
from opbench.results.model import Correctness, LayerResult, RunResult

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "data" / "suites" / "tiny.yaml"
SAS = REPO / "tests" / "data" / "reference" / "sas_fc_relu_fused.csv"


def bad_outs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each kind of bad --out, and the words its line must hold."""
    a_file = tmp_path / "taken.txt"
    a_file.write_text("not a folder\n")
    dangling = tmp_path / "gone"
    dangling.symlink_to(tmp_path / "nowhere")
    return {
        "file": (a_file, "is a file, not a folder"),
        "under a file": (a_file / "reports", f"cannot be created: {a_file} is a file"),
        "under a dangling link": (dangling / "reports", f"{dangling} is a link to nothing"),
    }


def one_error_line(done) -> str:
    assert "Traceback" not in done.output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.output
    return lines[0]


@pytest.mark.parametrize("kind", ["file", "under a file", "under a dangling link"])
def test_run_refuses_a_bad_out_before_any_device_work(tmp_path: Path, monkeypatch, kind):
    out, said = bad_outs(tmp_path)[kind]

    def no_device(*args, **kwargs):
        raise AssertionError("the device was prepared before --out was checked")

    monkeypatch.setattr(opbench.pipeline, "prepare_device", no_device)
    monkeypatch.setattr(opbench.pipeline, "run_suite", no_device)
    done = CliRunner().invoke(app, ["run", str(TINY), "--device", "cpu", "--out", str(out)])
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    line = one_error_line(done)
    assert f"{out}, field '--out'" in line and said in line


@pytest.mark.parametrize("kind", ["file", "under a file", "under a dangling link"])
def test_compare_refuses_a_bad_out_and_writes_nothing(tmp_path: Path, kind):
    out, said = bad_outs(tmp_path)[kind]
    run_dir = tmp_path / "run"
    layer = LayerResult(
        model="mlp", layer="fc1", op="linear", backend="triton", status="ok",
        dtype="float32", input_shape=(4, 8), output_shape=(4, 16), device="cuda",
        samples_ms=((0.04, 0.041, 0.039),),
        correctness=Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4),
    )  # fmt: skip
    run = RunResult(suite="s", started_at="2026-11-28T00:00:00Z", device="cuda", layers=(layer,))
    write_run(run, run_dir / "run.json")
    done = CliRunner().invoke(
        app, ["compare", str(run_dir), "--reference", str(SAS), "--out", str(out)]
    )
    assert done.exit_code == ExitCode.BAD_INPUT, done.output
    line = one_error_line(done)
    assert f"{out}, field '--out'" in line and said in line
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.json"]
