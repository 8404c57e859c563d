"""The Typer root: one line per command. Commands render; the stages compute."""

from __future__ import annotations

import typer

from opbench import __version__
from opbench.cli.compare import compare_command
from opbench.cli.export import export_app
from opbench.cli.info import env_command, list_command, validate_command
from opbench.cli.merge import merge_command
from opbench.cli.plans import plans_app
from opbench.cli.reference import reference_app
from opbench.cli.report import report_command
from opbench.cli.run import run_command
from opbench.cli.suite import suite_app

app = typer.Typer(
    name="opbench",
    help="Prove, layer by layer, that Triton kernels beat a reference engine.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"opbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Prove, layer by layer, that Triton kernels beat a reference engine."""


app.command("run")(run_command)
app.command("validate")(validate_command)
app.command("list")(list_command)
app.command("env")(env_command)
app.command("merge")(merge_command)

app.command("compare")(compare_command)
app.command("report")(report_command)
app.add_typer(reference_app, name="reference")
app.add_typer(export_app, name="export")
app.add_typer(suite_app, name="suite")
app.add_typer(plans_app, name="plans")


def main() -> None:
    app()
