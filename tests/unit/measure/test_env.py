"""The environment fingerprint records every OPBENCH_* switch that changes what runs."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.measure.env import fingerprint, opbench_vars
from opbench.results.io import read_run

SUITES = Path(__file__).resolve().parents[2] / "data" / "suites"


def test_every_opbench_switch_but_the_display_only_ones_is_recorded() -> None:
    environ = {
        "OPBENCH_TEST_SLOW_LAYERNORM": "1",
        "OPBENCH_CONV_FAST_LAUNCH": "1",
        "OPBENCH_CACHE_DIR": "/tmp/plans",
        "OPBENCH_SOMETHING_NEW": "x",  # a switch added later is recorded without a code change
        "OPBENCH_PROGRESS": "1",  # display only
        "PATH": "/bin",
        "MY_OPBENCH_NOTE": "not ours",
    }
    assert opbench_vars(environ) == {
        "OPBENCH_CACHE_DIR": "/tmp/plans",
        "OPBENCH_CONV_FAST_LAUNCH": "1",
        "OPBENCH_SOMETHING_NEW": "x",
        "OPBENCH_TEST_SLOW_LAYERNORM": "1",
    }


def test_the_fingerprint_has_the_switches_even_when_none_is_set(monkeypatch) -> None:
    for name in opbench_vars():
        monkeypatch.delenv(name)
    assert fingerprint("cpu")["opbench_vars"] == {}
    monkeypatch.setenv("OPBENCH_CONV_FAST_LAUNCH", "1")
    assert fingerprint("cpu")["opbench_vars"] == {"OPBENCH_CONV_FAST_LAUNCH": "1"}


def test_run_json_records_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPBENCH_TEST_SLOW_LAYERNORM", "1")
    out = tmp_path / "reports"
    result = CliRunner().invoke(
        app,
        ["run", str(SUITES / "tiny.yaml"), "--out", str(out), "--device", "cpu"]
        + ["--backend", "torch", "--model", "cnn", "--quick"],
    )
    assert result.exit_code == 0, result.output
    (run_json,) = (p for p in (out / "tiny").glob("*/run.json") if not p.parent.is_symlink())
    assert read_run(run_json).env["opbench_vars"]["OPBENCH_TEST_SLOW_LAYERNORM"] == "1"


def test_the_kernel_hash_covers_the_family_folders(tmp_path: Path, monkeypatch) -> None:
    from opbench.measure import env

    kernel = tmp_path / "kernels" / "attention" / "attention.py"
    kernel.parent.mkdir(parents=True)
    kernel.write_text("BLOCK = 64\n")
    monkeypatch.setattr(env, "PACKAGE_DIR", tmp_path)
    before = env.kernel_version()
    kernel.write_text("BLOCK = 128\n")
    assert env.kernel_version() != before
