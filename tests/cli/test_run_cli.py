"""`opbench run`, `validate`, `list` and `env` from the command line: files written, tables
printed, exit codes (0 ok, 2 bad input, 3 layer error or wrong result, 130 interrupted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.ops.activation import GELU
from opbench.ops.registry import OPS
from opbench.results.io import read_run, resolve_latest
from opbench.results.model import Status

REPO = Path(__file__).resolve().parents[2]
SUITES = REPO / "tests" / "data" / "suites"


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def run_dirs(out: Path, suite: str) -> list[Path]:
    return sorted(p for p in (out / suite).iterdir() if p.is_dir() and not p.is_symlink())


# ---- a successful run ----------------------------------------------------------------------------


def test_run_writes_run_json_and_latest_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = invoke("run", SUITES / "tiny.yaml", "--out", out, "--device", "cpu")
    assert result.exit_code == 0, result.output
    (run_dir,) = run_dirs(out, "tiny")
    run_path = run_dir / "run.json"
    run = read_run(run_path)
    assert run.complete and run.suite == "tiny" and run.device == "cpu"
    assert len(run.layers) == 6 and all(r.status == Status.OK and r.correct for r in run.layers)
    assert run.env["device"] == "cpu" and "torch" in run.env
    assert resolve_latest(out / "tiny") == run_dir.resolve()
    text = result.stdout
    assert "opbench run · tiny · cpu" in text
    for name in ("ln", "fc1", "act", "fc2", "conv", "pool"):
        assert name in text
    assert f"run written to {run_path}" in text
    assert "end to end" in text
    assert result.stderr == ""


def test_device_cpu_says_triton_runs_in_the_interpreter(tmp_path: Path) -> None:
    result = invoke(
        "run", SUITES / "tiny.yaml", "--out", tmp_path, "--device", "cpu", "--model", "cnn"
    )
    assert result.exit_code == 0, result.output
    assert "device: cpu" in result.stdout
    assert "interpreter" in result.stdout and "not performance figures" in result.stdout


def test_filters_and_shards(tmp_path: Path) -> None:
    result = invoke(
        "run",
        SUITES / "tiny.yaml",
        "--out",
        tmp_path,
        "--device",
        "cpu",
        "-m",
        "mlp",
        "-l",
        "fc2",
        "--rounds",
        "3",
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = run_dirs(tmp_path, "tiny")
    run = read_run(run_dir)
    assert [(r.model, r.layer) for r in run.layers] == [("mlp", "fc2")]
    assert len(run.layers[0].samples_ms) == 3
    assert run.end_to_end == (), "no end-to-end time when only some layers run"

    result = invoke(
        "run", SUITES / "tiny.yaml", "--out", tmp_path / "s", "--device", "cpu", "--shard", "2/4"
    )
    assert result.exit_code == 0, result.output
    (shard_dir,) = run_dirs(tmp_path / "s", "tiny")
    shard = read_run(shard_dir)
    assert shard.shard == (2, 4) and shard.complete
    from opbench.backends.registry import all_backends
    from opbench.pipeline import RunOptions
    from opbench.pipeline.plan import plan_run
    from opbench.spec.load import load_suite

    share = plan_run(load_suite(SUITES / "tiny.yaml"), RunOptions(shard=(2, 4)), all_backends())
    assert shard.planned == len(share.items) == len(shard.layers)
    assert [(r.model, r.layer) for r in shard.layers] == [
        (i.model.name, i.layers[0].name) for i in share.items
    ]
    # Whole-model rows come from the share that owns each forward, never from the others.
    assert {(e.model, e.backend) for e in shard.end_to_end} == {
        (u.model.name, u.backend) for u in share.end_to_end
    }


def test_two_runs_get_two_folders_and_latest_moves(tmp_path: Path) -> None:
    for _ in range(2):
        assert (
            invoke(
                "run", SUITES / "tiny.yaml", "--out", tmp_path, "--device", "cpu", "-l", "ln"
            ).exit_code
            == 0
        )
    first, second = run_dirs(tmp_path, "tiny")
    assert resolve_latest(tmp_path / "tiny") == second.resolve()


# ---- exit 3: a layer is wrong or broken ----------------------------------------------------------


def test_exit_3_when_a_layer_fails_correctness(tmp_path: Path) -> None:
    result = invoke("run", SUITES / "fails_tolerance.yaml", "--out", tmp_path, "--device", "cpu")
    assert result.exit_code == 3, result.output
    run = read_run(run_dirs(tmp_path, "strict")[0])
    (layer,) = run.layers
    assert layer.status == Status.WRONG and not layer.correct
    assert layer.correctness.tolerance == 1e-30 and layer.correctness.rel_l2 > 1e-30
    assert "wrong" in result.stdout
    assert "failed correctness" in result.stdout and "m/fc/torch" in result.stdout
    # a script reading only `status` in run.json sees the failed check (issue 40)
    (raw,) = json.loads((run_dirs(tmp_path, "strict")[0] / "run.json").read_text())["layers"]
    assert raw["status"] == "wrong" and raw["correctness"]["passed"] is False
    assert raw["correctness"]["failures"]
    # the progress line says what the table says (CliRunner is no terminal: one line a result)
    assert "  m · fc · torch: wrong" in result.stdout.splitlines()


def test_failure_line_names_sweep_instances(tmp_path: Path) -> None:
    text = (SUITES / "fails_tolerance.yaml").read_text().replace("batch: 2", "batch: [2, 3]")
    suite = tmp_path / "sweep.yaml"
    suite.write_text(text)
    result = invoke("run", suite, "--out", tmp_path / "out", "--device", "cpu")
    assert result.exit_code == 3, result.output
    (line,) = [x for x in result.stdout.splitlines() if "failed correctness" in x]
    assert "2 layer result(s)" in line
    assert "m[batch=2]/fc/torch, m[batch=3]/fc/torch" in line


def test_exit_3_when_a_layer_errors(tmp_path: Path, monkeypatch) -> None:
    def boom(self, x, weights, layer):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(GELU, "forward", boom)
    result = invoke("run", SUITES / "tiny.yaml", "--out", tmp_path, "--device", "cpu")
    assert result.exit_code == 3, result.output
    run = read_run(run_dirs(tmp_path, "tiny")[0])
    assert run.complete, "a broken layer does not stop the run"
    statuses = {r.layer: r.status for r in run.layers}
    assert statuses.pop("act") == Status.ERROR
    assert set(statuses.values()) == {Status.OK}
    assert "kaboom" in result.stdout and "mlp/act/torch" in result.stdout
    assert "Traceback" not in result.output


def test_unsupported_layers_do_not_fail_the_run(tmp_path: Path, monkeypatch) -> None:
    from opbench.backends import triton as triton_backend

    for name in OPS:  # (a placeholder has no builder to remove: no backend runs it)
        monkeypatch.delitem(triton_backend.BUILDERS, name, raising=OPS[name].runs)
    text = (
        (SUITES / "tiny.yaml").read_text().replace("backends: [torch]", "backends: [torch, triton]")
    )
    suite = tmp_path / "both.yaml"
    suite.write_text(text)
    result = invoke("run", suite, "--out", tmp_path / "out", "--device", "cpu", "-m", "cnn")
    assert result.exit_code == 0, result.output
    assert "unsupported" in result.stdout and "no Triton kernel for op 'conv2d'" in result.stdout


def test_interrupted_run_exits_130_and_keeps_its_results(tmp_path: Path, monkeypatch) -> None:
    import opbench.pipeline.measure as pipeline

    real = pipeline.measure_item
    calls = []

    def interrupt_on_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "measure_item", interrupt_on_third)
    result = invoke("run", SUITES / "tiny.yaml", "--out", tmp_path, "--device", "cpu")
    assert result.exit_code == 130, result.output
    (run_dir,) = run_dirs(tmp_path, "tiny")
    run = read_run(run_dir)
    assert run.complete is False and len(run.layers) == 2 and run.planned == 6
    assert resolve_latest(tmp_path / "tiny") == run_dir.resolve()
    assert "interrupted" in result.stdout and "kept 2 of 6" in result.stdout


# ---- exit 2: bad options -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (["--shard", "x"], "--shard takes K/N"),
        (["--shard", "1/2/3"], "--shard takes K/N"),
        (["--shard", "a/b"], "--shard takes K/N"),
        (["--shard", "3/2"], "1 <= K <= N"),
        (["--shard", "0/2"], "1 <= K <= N"),
        (["--shard", "1/0"], "1 <= K <= N"),
        (["--shard", "-1/2"], "1 <= K <= N"),
        (["--backend", "tirton"], "unknown backend 'tirton' (did you mean 'triton'?)"),
        (["--backend", "torch", "--backend", "onnx"], "unknown backend 'onnx'"),
        (["--model", "mpl"], "no model 'mpl' in the suite (did you mean 'mlp'?)"),
        (["--layer", "fc3"], "no layer 'fc3' in the suite"),
        (["--device", "tpu"], "--device must be cuda or cpu"),
    ],
)
def test_bad_options_exit_2_with_one_line(tmp_path: Path, options: list[str], message: str) -> None:
    out = tmp_path / "out"
    result = invoke("run", SUITES / "tiny.yaml", "--out", out, *options)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0]
    assert "Traceback" not in result.output
    assert not out.exists(), "nothing is written before the options are checked"


def test_cuda_without_a_gpu_is_bad_input(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = invoke("run", SUITES / "tiny.yaml", "--out", tmp_path / "out", "--device", "cuda")
    assert result.exit_code == 2
    assert "no GPU is visible" in result.stderr


def test_bad_rounds_is_rejected_by_the_option_parser(tmp_path: Path) -> None:
    result = invoke("run", SUITES / "tiny.yaml", "--out", tmp_path / "out", "--rounds", "0")
    assert result.exit_code == 2
    assert not (tmp_path / "out").exists()


# ---- validate, list, env -------------------------------------------------------------------------


def table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in text.splitlines()
        if line.startswith("│")
    ]


def test_validate_prints_every_layer() -> None:
    result = invoke("validate", SUITES / "sweep_chain.yaml")
    assert result.exit_code == 0, result.output
    assert "3 model instance(s), 12 layers" in result.stdout
    rows = table_rows(result.stdout)
    assert len(rows) == 12
    assert [row[1] for row in rows[:4]] == ["fc", "act", "side", "flat"]
    assert rows[8][4:6] == ["[8, 5, 12]", "[8, 5, 7]"]
    assert result.stdout.rstrip().endswith("sweep_chain.yaml is valid")


def test_tables_show_sweep_instance_names(tmp_path: Path) -> None:
    result = invoke("validate", SUITES / "sweep_chain.yaml")
    assert {row[0] for row in table_rows(result.stdout)} == {
        "mlp[batch=1]",
        "mlp[batch=3]",
        "mlp[batch=8]",
    }
    result = invoke(
        "run", SUITES / "sweep_chain.yaml", "--out", tmp_path, "--device", "cpu", "-l", "fc"
    )
    assert [row[0] for row in table_rows(result.stdout)][:3] == [
        "mlp[batch=1]",
        "mlp[batch=3]",
        "mlp[batch=8]",
    ]


def test_list_ops_names_every_op_and_its_parameters() -> None:
    result = invoke("list", "ops")
    assert result.exit_code == 0
    for name in OPS:
        assert name in result.stdout
    assert "out_features, bias=true, activation=none, quant=none" in result.stdout


def test_list_backends_says_which_are_available() -> None:
    result = invoke("list", "backends")
    assert result.exit_code == 0, result.output
    rows = {
        line.split("│")[1].strip(): line
        for line in result.stdout.splitlines()
        if line.count("│") >= 3
    }
    assert set(rows) >= {"torch", "torch-compile", "triton"}
    assert "available" in rows["torch"] and "unavailable" not in rows["torch"]
    assert "available" in rows["triton"]


def test_list_rejects_unknown_things() -> None:
    assert invoke("list", "kernels").exit_code == 2


def test_env_json() -> None:
    result = invoke("env", "--json")
    assert result.exit_code == 0, result.output
    env = json.loads(result.stdout)
    for key in ("opbench", "kernel_version", "python", "torch", "triton", "device", "platform"):
        assert key in env
    assert env["device"] in ("cpu", "cuda")


# ---- the real executable: exit codes and no traceback ----------------------------------------


def _opbench(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "opbench", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize("command", ["validate", "run"])
def test_real_process_bad_suite(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: s\nmodels:\n  - name: m\n    input: [3, 8]\n    layers:\n      - {name: a, op: softmx}\n"
    )
    proc = _opbench(command, bad, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        f"error: {bad}:6:19, model 'm', layer 'a', field 'op': unknown op 'softmx' (did you mean 'softmax'?)"
    )
    assert not (tmp_path / "reports").exists()


def test_real_process_bad_shard(tmp_path: Path) -> None:
    proc = _opbench("run", SUITES / "tiny.yaml", "--shard", "5/4", "--out", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: field '--shard': --shard K/N needs 1 <= K <= N; got '5/4'"
    assert "Traceback" not in proc.stdout + proc.stderr


def test_real_process_validate_ok() -> None:
    proc = _opbench("validate", "suites/quickstart.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "suites/quickstart.yaml is valid" in proc.stdout
