"""`opbench compare`, `opbench report` and `opbench reference onnxruntime` through Typer's
CliRunner: exit codes 0/1/2, --no-gate, nothing written on bad input, and the quickstart suite
end to end (ONNX Runtime reference → opbench run → compare)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from opbench.cli.compare import compare_command
from opbench.cli.reference import reference_app
from opbench.cli.report import report_command
from opbench.errors import ExitCode
from opbench.results.io import new_run_dir, point_latest, write_run
from opbench.results.model import Correctness, LayerResult, RunResult

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "suites" / "quickstart.yaml"

# Registered exactly as opbench/cli/main.py registers them.
app = typer.Typer()
app.command("compare")(compare_command)
app.command("report")(report_command)
app.add_typer(reference_app, name="reference")

runner = CliRunner()
REPORT_FILES = {
    "comparison.json",
    "comparison.csv",
    "end_to_end.csv",
    "report.md",
    "report.html",
    "speedup.png",
    "speedup.svg",
    "times.png",
    "times.svg",
    "roofline.png",
    "roofline.svg",
    "models.png",
    "models.svg",
}


def _result(layer: str, ms: float, backend: str = "triton") -> LayerResult:
    return LayerResult(
        model="mlp",
        layer=layer,
        op="linear",
        backend=backend,
        status="ok",
        dtype="float16",
        input_shape=(4, 8),
        output_shape=(4, 8),
        samples_ms=((ms,) * 20,),
        correctness=Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4),
    )


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """reports/demo/<stamp>/run.json with fc1 at 1 ms and fc2 at 1 ms (triton and torch)."""
    run = RunResult(
        suite="demo",
        started_at="2026-11-22T00:00:00Z",
        device="cuda",
        complete=True,
        layers=tuple(_result(n, 1.0, b) for n in ("fc1", "fc2") for b in ("triton", "torch")),
    )
    folder = new_run_dir(tmp_path / "reports", "demo", "20261122T000000Z")
    write_run(run, folder / "run.json")
    point_latest(folder)
    return folder


@pytest.fixture
def fast_plots(monkeypatch):
    """For tests about exit codes and options: stand-in plots instead of matplotlib's (slow)."""
    from opbench.report import files
    from opbench.report.plots import PLOT_NAMES, PlotImage

    stub = [
        PlotImage(n, n, b"\x89PNG\r\n\x1a\n", b"<svg xmlns='http://www.w3.org/2000/svg'/>")
        for n in PLOT_NAMES
    ]
    monkeypatch.setattr(files, "render_plots", lambda _comparison: stub)


def reference(tmp_path: Path, fc1_ms: float, fc2_ms: float, name: str = "ref.csv") -> Path:
    path = tmp_path / name
    path.write_text(f"layer,time_ms\nfc1,{fc1_ms}\nfc2,{fc2_ms}\n")
    return path


def files_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_all_pass_exits_0_and_writes_reports(run_dir: Path, tmp_path: Path):
    done = runner.invoke(
        app, ["compare", str(run_dir), "--reference", str(reference(tmp_path, 3, 3))]
    )
    assert done.exit_code == 0, done.output
    assert "format sas (detected)" in done.output
    assert files_in(run_dir) == {"run.json"} | REPORT_FILES
    data = json.loads((run_dir / "comparison.json").read_text())
    assert [row["timings"][0]["verdict"] for row in data["rows"]] == ["PASS", "PASS"]


def test_a_fail_exits_1_unless_no_gate(run_dir: Path, tmp_path: Path, fast_plots):
    ref = str(reference(tmp_path, 3, 1.2))
    done = runner.invoke(app, ["compare", str(run_dir), "--reference", ref])
    assert done.exit_code == 1, done.output
    assert "FAIL" in done.output
    assert (run_dir / "report.html").is_file()
    done = runner.invoke(app, ["compare", str(run_dir), "--reference", ref, "--no-gate"])
    assert done.exit_code == 0, done.output


def test_target_and_backend_options(run_dir: Path, tmp_path: Path, fast_plots):
    ref = str(reference(tmp_path, 3, 1.2))
    assert (
        runner.invoke(app, ["compare", str(run_dir), "-r", ref, "--target", "1.1"]).exit_code == 0
    )
    done = runner.invoke(
        app,
        ["compare", str(run_dir / "run.json"), "-r", ref, "--backend", "torch", "--target", "4"],
    )
    assert done.exit_code == 1, done.output


def test_default_run_is_the_latest_and_out_folder(
    run_dir: Path, tmp_path: Path, monkeypatch, fast_plots
):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "elsewhere"
    done = runner.invoke(
        app, ["compare", "--reference", str(reference(tmp_path, 3, 3)), "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert files_in(out) == REPORT_FILES
    assert files_in(run_dir) == {"run.json"}


def test_no_run_anywhere_is_bad_input(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["compare", "--reference", str(reference(tmp_path, 3, 3))])
    assert done.exit_code == 2
    assert "no run found" in done.output


@pytest.mark.parametrize(
    ("make_args", "message"),
    [
        (lambda d, t: ["--reference", str(t / "absent.csv")], "absent.csv"),
        (
            lambda d, t: ["--reference", str(reference(t, 3, 3)), "--format", "pdf"],
            "unknown format",
        ),
        (
            lambda d, t: ["--reference", str(reference(t, 3, 3)), "--backend", "tensorrt"],
            "no results for backend",
        ),
        (lambda d, t: ["--reference", str(reference(t, 3, 3)), "--model", "vit"], "not in the run"),
        (
            lambda d, t: ["--reference", str(reference(t, 3, 3)), "--unit", "parsecs"],
            "unknown time unit",
        ),
        (lambda d, t: ["--reference", str(reference(t, 3, 3)), "--target", "0"], "--target"),
        (lambda d, t: ["--reference", str(_write(t / "bad.json", '[{"cat": "Node",'))], "bad.json"),
        (
            lambda d, t: [
                "--reference",
                str(reference(t, 3, 3)),
                "--map",
                str(_write(t / "m.yaml", "x: [fc1\n")),
            ],
            "m.yaml:1:4",  # the unclosed [ of a one-line file, not past its end
        ),
        (
            lambda d, t: [
                "--reference",
                str(reference(t, 3, 3)),
                "--map",
                str(_write(t / "m.yaml", "x: nope\n")),
            ],
            "m.yaml:1",
        ),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    run_dir: Path, tmp_path: Path, make_args, message: str
):
    done = runner.invoke(app, ["compare", str(run_dir), *make_args(run_dir, tmp_path)])
    assert done.exit_code == 2, done.output
    assert message in done.output
    assert "Traceback" not in done.output
    assert len(done.output.strip().splitlines()) == 1  # one line
    assert files_in(run_dir) == {"run.json"}


def test_corrupt_run_is_bad_input(tmp_path: Path):
    folder = tmp_path / "run"
    folder.mkdir()
    _write(folder / "run.json", '{"schema_version": 1, "suite": ')
    done = runner.invoke(
        app, ["compare", str(folder), "--reference", str(reference(tmp_path, 1, 1))]
    )
    assert done.exit_code == 2
    assert "run.json:1" in done.output
    assert files_in(folder) == {"run.json"}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_map_option(run_dir: Path, tmp_path: Path, fast_plots):
    ref = tmp_path / "ref.csv"
    ref.write_text("layer,time_ms\nDense_A,3\nDense_B,3\n")
    mapping = _write(tmp_path / "map.yaml", "Dense_A: fc1\nDense_B: mlp/fc2\n")
    done = runner.invoke(app, ["compare", str(run_dir), "-r", str(ref), "--map", str(mapping)])
    assert done.exit_code == 0, done.output
    data = json.loads((run_dir / "comparison.json").read_text())
    assert [(row["layers"], row["sources"]) for row in data["rows"]] == [
        (["fc1"], ["map"]),
        (["fc2"], ["map"]),
    ]


def test_report_rerenders_from_comparison_json(run_dir: Path, tmp_path: Path):
    assert (
        runner.invoke(
            app, ["compare", str(run_dir), "-r", str(reference(tmp_path, 3, 1.2)), "--no-gate"]
        ).exit_code
        == 0
    )
    for name in REPORT_FILES - {"comparison.json"}:
        (run_dir / name).unlink()
    done = runner.invoke(app, ["report", str(run_dir)])
    assert done.exit_code == 0, done.output
    assert files_in(run_dir) == {"run.json"} | REPORT_FILES
    out = tmp_path / "copy"
    assert (
        runner.invoke(app, ["report", str(run_dir / "run.json"), "--out", str(out)]).exit_code == 0
    )
    assert files_in(out) == REPORT_FILES


def test_report_without_comparison_is_bad_input(run_dir: Path):
    done = runner.invoke(app, ["report", str(run_dir)])
    assert done.exit_code == 2
    assert "opbench compare" in done.output
    assert files_in(run_dir) == {"run.json"}


def test_reference_onnxruntime_bad_input(tmp_path: Path):
    done = runner.invoke(app, ["reference", "onnxruntime", str(tmp_path / "none.yaml")])
    assert done.exit_code == 2
    assert "no such suite file" in done.output
    done = runner.invoke(
        app,
        [
            "reference",
            "onnxruntime",
            str(QUICKSTART),
            "--model",
            "vit",
            "--out",
            str(tmp_path / "x.json"),
        ],
    )
    assert done.exit_code == 2
    assert "no model 'vit'" in done.output
    assert not (tmp_path / "x.json").exists()


def test_quickstart_end_to_end(tmp_path: Path, monkeypatch):
    """ONNX Runtime reference for the quickstart mlp → `opbench run` (torch backend, quick) →
    compare: every layer and every ONNX node is accounted for."""
    pytest.importorskip("onnxruntime")
    from opbench.cli.main import app as main_app

    monkeypatch.chdir(tmp_path)
    ref = tmp_path / "quickstart_ort.json"
    done = runner.invoke(
        app,
        [
            "reference",
            "onnxruntime",
            str(QUICKSTART),
            "--model",
            "mlp",
            "--runs",
            "3",
            "--out",
            str(ref),
        ],
    )
    assert done.exit_code == 0, done.output
    meta = json.loads((tmp_path / "quickstart_ort.meta.json").read_text())
    assert meta["models"] == ["mlp"] and meta["runs"] == 3 and meta["skipped_layers"] == []

    done = runner.invoke(
        main_app,
        [
            "run",
            str(QUICKSTART),
            "--model",
            "mlp",
            "--backend",
            "torch",
            "--quick",
            "--device",
            "cpu",
        ],
    )
    assert done.exit_code == 0, done.output
    done = runner.invoke(
        main_app, ["compare", "--reference", str(ref), "--backend", "torch", "--no-gate"]
    )
    assert done.exit_code == 0, done.output
    assert "format onnxruntime (detected)" in done.output

    (run_folder,) = [
        p
        for p in (tmp_path / "reports" / "quickstart").iterdir()
        if not p.is_symlink() and p.is_dir()
    ]
    data = json.loads((run_folder / "comparison.json").read_text())
    layers = [layer for row in data["rows"] for layer in row["layers"]]
    assert layers == ["ln", "fc1", "act", "fc2", "rms", "head", "probs"]
    assert all(row["reference"]["value"] > 0 for row in data["rows"])
    assert not [u for u in data["unmatched"] if u["side"] == "suite"]
    assert not [u for u in data["unmatched"] if u["side"] == "reference"]


def test_reference_onnxruntime_lists_layers_it_cannot_export(tmp_path: Path, monkeypatch):
    """A layer whose op has no ONNX form is left out and listed; the layers after it take a
    fresh graph input, and the profile still holds every other layer."""
    pytest.importorskip("onnxruntime")
    from opbench.ops.activation import SiLU

    monkeypatch.delattr(SiLU, "onnx_nodes")  # silu's ONNX form is its op's own
    suite = _write(
        tmp_path / "tiny.yaml",
        "name: tiny\n"
        "defaults: {dtype: float32, backends: [torch]}\n"
        "models:\n"
        "  - name: mlp\n"
        "    batch: 2\n"
        "    input: [12]\n"
        "    layers:\n"
        "      - {name: fc1, op: linear, out_features: 16}\n"
        "      - {name: act, op: silu}\n"
        "      - {name: fc2, op: linear, out_features: 8}\n",
    )
    out = tmp_path / "ref.json"
    done = runner.invoke(
        app, ["reference", "onnxruntime", str(suite), "--runs", "2", "--out", str(out)]
    )
    assert done.exit_code == 0, done.output
    assert "left out mlp/act (silu)" in done.output and "no ONNX form" in done.output
    meta = json.loads((tmp_path / "ref.meta.json").read_text())
    assert [(s["model"], s["layer"]) for s in meta["skipped_layers"]] == [("mlp", "act")]
    names = {e["name"] for e in json.loads(out.read_text()) if e.get("cat") == "Node"}
    assert any(n.startswith("/mlp/fc1/") for n in names)
    assert any(n.startswith("/mlp/fc2/") for n in names)  # after the gap, from a fresh input
    assert not any(n.startswith("/mlp/act/") for n in names)


@pytest.mark.parametrize(
    ("key", "before", "after"),
    [
        ("opbench_vars", {}, {"OPBENCH_CONV_PLAN": "fast"}),
        ("plugins", [], [{"name": "opbench-extra", "version": "0.2"}]),
    ],
)
def test_changed_opbench_vars_or_plugins_make_the_baseline_incomparable(
    tmp_path: Path, key: str, before, after
):
    def run_with(value) -> Path:
        run = RunResult(
            suite="demo",
            started_at="2026-11-22T00:00:00Z",
            device="cuda",
            complete=True,
            env={"gpu_name": "NVIDIA H200", "triton": "3.6.0", key: value},
            layers=(
                replace(
                    _result("fc1", 1.0),
                    samples_ms=tuple((1.0 + 0.001 * r,) * 5 for r in range(5)),
                ),
            ),
        )
        folder = tmp_path / f"run-{len(str(value))}"
        folder.mkdir()
        write_run(run, folder / "run.json")
        return folder

    base, current = run_with(before), run_with(after)
    refused = runner.invoke(app, ["compare", str(current), "--baseline", str(base)])
    assert refused.exit_code == ExitCode.BASELINE, refused.output
    assert key in refused.output
    allowed = runner.invoke(
        app, ["compare", str(current), "--baseline", str(base), "--allow-env-change"]
    )
    assert allowed.exit_code == ExitCode.OK, allowed.output
