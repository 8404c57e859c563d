"""`opbench report [RUN]`: re-render every report from comparison.json (no GPU, no re-run)."""

from __future__ import annotations

from pathlib import Path

import typer

from opbench.cli.console import handles_errors
from opbench.cli.runs import check_out_folder, resolve_run_path
from opbench.cli.target import FULL_TABLES, finish
from opbench.report.csvjson import JSON_FILE, read_comparison


def comparison_path(run: Path) -> Path:
    """A folder holding comparison.json, comparison.json itself, or a run.json beside one."""
    if run.is_dir():
        return run / JSON_FILE
    if run.name != JSON_FILE and run.suffix == ".json" and (run.parent / JSON_FILE).exists():
        return run.parent / JSON_FILE
    return run


@handles_errors
def report_command(
    run: Path | None = typer.Argument(
        None,
        metavar="[RUN]",
        help="Run folder, run.json or comparison.json (default: the latest run).",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the reports (default: beside comparison.json)."
    ),
    wide: bool = typer.Option(
        False, "--wide", help="Print every column of the tables, whatever the terminal width."
    ),
) -> None:
    """Re-render the table, report.md, report.html, comparison.csv and the plots from comparison.json."""
    if out is not None:
        check_out_folder(out)
    path = comparison_path(resolve_run_path(run))
    comparison = read_comparison(path)
    FULL_TABLES.set(wide)
    # A re-render judges nothing anew: it exits 0 on good input, whatever the verdicts say
    # (`opbench compare` gave their exit code).
    finish(comparison, out or path.parent, gate=False, with_json=out is not None)
