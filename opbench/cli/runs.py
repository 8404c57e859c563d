"""Finding the run a command works on: the run folder or run.json given, else the newest run
under reports/. Shared by compare, report and the gate."""

from __future__ import annotations

import os
from pathlib import Path

from opbench.errors import InputError
from opbench.results.io import find_latest_run

REPORTS_ROOT = Path("reports")


def resolve_run_path(run: Path | None) -> Path:
    """RUN as given (a run folder or its run.json), else the newest run under reports/."""
    if run is not None:
        return run
    latest = find_latest_run(REPORTS_ROOT)
    if latest is None:
        raise InputError(
            f"no run found under {REPORTS_ROOT}/: run `opbench run SUITE` first, or name a run folder"
        )
    return latest


def run_folder(run: Path) -> Path:
    """The folder of a run; `<suite>/latest` is followed to the run it names."""
    folder = run if run.is_dir() else run.parent
    if folder.is_symlink():
        folder = folder.parent / os.readlink(folder)
    return folder
