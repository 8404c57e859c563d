"""The worked example, installed the way a user installs it (pip, from its pyproject), found
through its entry points, and its suite run end to end on the CPU (Triton's interpreter),
checks and all; then `opbench compare` judges its backend like any other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from opbench.results.io import read_run
from opbench.results.model import Status

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "opbench-example-plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The example package pip-installed into a folder of its own (no network, no deps)."""
    work = tmp_path_factory.mktemp("example")
    source = work / "src"
    shutil.copytree(EXAMPLE, source)  # pip writes build files next to the sources
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        + ["--no-build-isolation", "--target", str(target), str(source)],
        check=True,
        capture_output=True,
    )
    assert (target / "opbench_example_plugin-0.1.0.dist-info" / "entry_points.txt").is_file()
    return target


def opbench(site: Path, *args: object, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)]), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "opbench", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
    )


def test_example_suite_runs_end_to_end_and_compare_judges_the_plugin_backend(
    installed: Path, tmp_path: Path
) -> None:
    listed = opbench(installed, "list", "backends", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert any(
        "example-triton" in line and "opbench-example-plugin 0.1.0" in line
        for line in listed.stdout.splitlines()
    ), listed.stdout

    done = opbench(
        installed,
        "run",
        EXAMPLE / "suite.yaml",
        "--device",
        "cpu",
        "--quick",
        "--out",
        tmp_path / "reports",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = (tmp_path / "reports" / "example-plugin" / "latest").resolve()
    run = read_run(run_dir / "run.json")
    assert run.env["plugins"] == [{"name": "opbench-example-plugin", "version": "0.1.0"}]
    ours = [r for r in run.layers if r.backend == "example-triton"]
    # norm and gate in block[batch=1], block[batch=4] and block-fp16
    assert len(ours) == 6
    assert {r.op for r in ours} == {"rmsnorm", "swiglu"}
    for result in ours:
        assert result.status == Status.OK and result.correctness.passed, result
        assert result.interpreted  # Triton kernels on the CPU: no performance figures
    fp16_gate = run.find("block-fp16", "gate", "example-triton")
    assert fp16_gate.output_shape == (1, 32, 128) and fp16_gate.flops == 6 * 32 * 128
    assert run.find("block-fp16", "gate", "torch").status == Status.OK
    assert {r.backend for r in run.layers} == {"torch", "triton", "example-triton"}

    reference = tmp_path / "ref.csv"
    reference.write_text("layer,time_ms\nnorm,0.5\ngate,0.4\n")
    compared = opbench(
        installed,
        "compare",
        run_dir,
        "--reference",
        reference,
        "--backend",
        "example-triton",
        "--model",
        "block-fp16",
        "--no-gate",
        cwd=tmp_path,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "example-triton ms" in compared.stdout and "torch ms" in compared.stdout
    comparison = json.loads((run_dir / "comparison.json").read_text())
    assert comparison["backend"] == "example-triton"
    assert [row["layers"] for row in comparison["rows"]] == [["norm"], ["gate"]]
    for row in comparison["rows"]:
        assert [t["backend"] for t in row["timings"]][0] == "example-triton"
        assert row["timings"][0]["correct"] and row["timings"][0]["interpreted"]
    assert "example-triton" in (run_dir / "report.md").read_text()
