"""Every script of benchmarks/ runs its `--tiny` CPU mode (Triton's interpreter, tiny shapes):
the plumbing a GPU session relies on works before the session is spent on it. In this process,
so that no script pays for importing torch and Triton again."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Modules the scripts import, not scripts.
HELPERS = {"timing.py", "attention_gpu_common.py", "peer_models.py"}
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)


def test_every_script_is_listed_in_the_readme() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    assert [s for s in SCRIPTS if f"`{s}`" not in readme] == []


@pytest.mark.parametrize("script", SCRIPTS)
def test_tiny_mode_runs(script: str, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OUT", str(tmp_path))
    # Scripts set these for their own process; monkeypatch puts them back for the next test.
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path / "plans"))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / script), "--tiny"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    try:
        runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    except SystemExit as done:
        assert done.code in (0, None), capsys.readouterr().out[-2000:]
    assert capsys.readouterr().out.strip(), "the script printed nothing"
