"""Finding the run a command works on: the run folder or run.json given, else the newest run
under reports/. Shared by compare, report and the gate."""

from __future__ import annotations

import os
from pathlib import Path

from opbench.errors import InputError, Location
from opbench.results.io import find_latest_run
from opbench.results.model import RunResult

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


def check_out_folder(path: Path, option: str = "--out") -> None:
    """`path` is a folder the command can write into, or one it can create: else bad input
    (exit 2), raised before any work is done, never an OSError after it."""
    where = Location(file=str(path), field=option)
    if path.exists():
        if not path.is_dir():
            raise InputError("is a file, not a folder", where)
        if not os.access(path, os.W_OK | os.X_OK):
            raise InputError("is a folder this user cannot write into", where)
        return
    for parent in path.absolute().parents:
        if parent.is_symlink() and not parent.exists():
            raise InputError(f"cannot be created: {parent} is a link to nothing", where)
        if not parent.exists():
            continue
        if not parent.is_dir():
            raise InputError(f"cannot be created: {parent} is a file, not a folder", where)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"cannot be created: this user cannot write into {parent}", where)
        return


def make_folder(path: Path, option: str = "--out") -> Path:
    """mkdir -p, with a failure (a race, a full disk) as bad input naming the folder."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot be created: {exc.strerror or exc}", Location(file=str(path), field=option)
        ) from None
    return path


def judged_run_line(run: RunResult, folder: Path, given: Path | None) -> str:
    """Which run a command judges: its folder (`latest` followed), suite and start time, and
    how it was chosen when RUN was not given; said first, so that a reader of the verdicts
    never has to guess which run they are about."""
    how = "" if given is not None else " (the newest under reports/: no RUN given)"
    state = (
        "" if run.complete else f" · incomplete: {len(run.layers)} of {run.planned or '?'} results"
    )
    return f"run: {folder}{how} · suite {run.suite} · started {run.started_at}{state}"
