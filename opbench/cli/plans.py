"""`opbench plans tune`: regenerate the package's shipped plan tables for this GPU.

    opbench plans tune suites/*.yaml            # build + bind every Triton layer, tuning each
    opbench plans tune --from run.json ...      # or take the plans a run (or --plans-out) made

Either way the tuned choices land in opbench/kernels/shipped/<GPU>.json (or --out DIR),
merged with what the table already holds for this GPU and Triton release. While tuning, the
shipped tables are ignored (every kernel is timed afresh).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.errors import InputError, Location

plans_app = typer.Typer(no_args_is_help=True, help="The package's shipped plan tables.")


@plans_app.command("tune")
@handles_errors
def tune_command(
    suites: list[Path] = typer.Argument(None, metavar="SUITE...", help="Suites to tune."),
    source: list[Path] = typer.Option(
        [], "--from", help="Take the plans of these run.json / plan files instead of tuning."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder of the tables (default: the package's kernels/shipped)."
    ),
) -> None:
    """Tune the suites' Triton layers on this GPU and write its shipped plan table."""
    from opbench.kernels.shipped_plans import (
        SHIPPED_DIR,
        entries_of_choices,
        merge_table,
        table_path,
    )
    from opbench.results.io import write_json_atomic

    if not suites and not source:
        raise InputError("give suites to tune or --from plan files", Location(field="SUITE"))
    command = "opbench plans tune " + shlex.join(sys.argv[3:])
    choices: list = []
    if source:
        from opbench.pipeline.plans import read_plans

        for path in source:
            for plan in read_plans(path).plans.values():
                choices.extend(plan.get("choices", []))
    if suites:
        choices.extend(_tune(suites))
    entries = entries_of_choices(choices)
    tags = {c.get("device") for c in choices if f"{c.get('kernel')}|{c.get('key')}" in entries}
    if not entries:
        console.print("no tuned plans to write (every kernel had a single candidate)")
        return
    if len(tags) != 1 or "interpreter" in tags:
        raise InputError(f"plans from several or no GPUs: {sorted(map(str, tags))}", Location())
    (tag,) = tags
    path = table_path(tag.split("|")[0], out or SHIPPED_DIR)
    table = merge_table(path, tag, entries, command)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, table)
    console.print(
        f"{len(entries)} plan(s) for {tag}: [bold]{path}[/] ({len(table['plans'])} in all)"
    )


def _tune(suites: list[Path]) -> list:
    import torch

    from opbench.kernels.tuning import NO_SHIPPED_ENV
    from opbench.pipeline import prepare_device
    from opbench.pipeline.tune_only import tune_suites
    from opbench.spec.load import load_suite

    if not torch.cuda.is_available():
        raise InputError("plans tune needs a GPU: plans are tuned on the GPU they are for",
                         Location(field="--device"))  # fmt: skip
    loaded = [load_suite(path) for path in suites]
    os.environ[NO_SHIPPED_ENV] = "1"
    prepare_device("cuda")
    report = tune_suites(loaded, "cuda", progress=lambda name: console.print(f"  {name}"))
    for name, why in report.skipped:
        console.print(f"[dim]skipped {name}: {why}[/]")
    console.print(
        f"bound {report.layers} Triton layer(s) in {report.wall_s:.1f} s, "
        f"{report.tuning_s:.1f} s of it timing candidates"
    )
    return report.choices
