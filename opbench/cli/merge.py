"""`opbench merge RUN...`: join partial runs made with --shard into one run.json."""

from __future__ import annotations

from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.cli.runs import check_out_folder
from opbench.results.io import RUN_FILE, new_run_dir, point_latest, read_run, write_run
from opbench.results.merge import merge_runs


@handles_errors
def merge_command(
    runs: list[Path] = typer.Argument(
        ..., metavar="RUN...", help="Partial run folders or run.json files."
    ),
    out: Path = typer.Option(
        Path("reports"), "--out", help="Folder that receives <suite>/<timestamp>/run.json."
    ),
    allow_partial: bool = typer.Option(
        False, "--allow-partial", help="Merge even if shares are missing or incomplete."
    ),
) -> None:
    """Join partial runs (opbench run --shard K/N) into one run."""
    check_out_folder(out)
    loaded = [read_run(path) for path in runs]
    merged, warnings = merge_runs(loaded, [str(p) for p in runs], allow_partial=allow_partial)
    run_dir = new_run_dir(out, merged.suite)
    write_run(merged, run_dir / RUN_FILE)
    point_latest(run_dir)
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    state = "complete" if merged.complete else "[yellow]incomplete[/]"
    console.print(
        f"merged {len(loaded)} run(s), {len(merged.layers)} results, {state}: [bold]{run_dir / RUN_FILE}[/]"
    )
