"""`opbench compare … | head -1`: a reader that closes stdout early is no verdict. The reports
are written before anything is printed, and the exit code is the verdicts' own (issue 29,
case 6). The command runs in a real process whose stdout is a pipe with no reader."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from opbench.errors import ExitCode
from opbench.results.io import write_run
from opbench.results.model import Correctness, LayerResult, RunResult

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "data" / "reference" / "sas_dense7.csv"
LAYERS = ("Dense_1", "Relu_1", "Dense_2", "Relu_2", "Dense_3", "Relu_3", "Dense_4")


def dense_run(ms: float) -> RunResult:
    results = tuple(
        LayerResult(
            model="dense",
            layer=name,
            op="linear" if name.startswith("Dense") else "relu",
            backend="triton",
            status="ok",
            dtype="float32",
            input_shape=(4, 64),
            output_shape=(4, 64),
            samples_ms=((ms,) * 20,),
            correctness=Correctness(rel_l2=1e-7, max_abs=1e-6, nonfinite=0, tolerance=1e-4),
            device="cuda",
        )
        for name in LAYERS
    )
    spec = {"models": [{"name": "dense", "layers": [{"name": n} for n in LAYERS]}]}
    return RunResult(
        suite="pipe", started_at="t", device="cuda", layers=results, suite_spec=spec, complete=True
    )


def compare_into_a_closed_pipe(tmp_path: Path, run: RunResult) -> subprocess.CompletedProcess:
    folder = tmp_path / "run"
    write_run(run, folder / "run.json")
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -1` that has already gone: every write to stdout fails
    try:
        return subprocess.run(
            [sys.executable, "-m", "opbench", "compare", str(folder), "-r", str(REFERENCE)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"},
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    ("ms", "code"),
    [(0.01, ExitCode.OK), (1.0, ExitCode.FAILED_GATE)],  # every row PASSes / every row FAILs
)
def test_a_closed_stdout_keeps_the_reports_and_the_verdicts_exit_code(tmp_path: Path, ms, code):
    done = compare_into_a_closed_pipe(tmp_path, dense_run(ms))
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
    folder = tmp_path / "run"
    for name in ("comparison.json", "report.md", "report.html", "comparison.csv"):
        assert (folder / name).is_file(), name
