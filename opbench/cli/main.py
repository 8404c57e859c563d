"""The Typer root: one line per command. Commands render; the stages compute.

A command's module is imported when that command runs (or when help lists it), so each
command pays only for its own imports: `opbench validate model.onnx` and `opbench suite
from-onnx` load no compare, gate or report code, and no torch (tests/cli/test_cli_imports.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

import typer
from typer.core import TyperGroup

from opbench import __version__

# name -> (module, attribute): a Typer app (a command group) or a command function.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("opbench.cli.run", "run_command"),
    "validate": ("opbench.cli.info", "validate_command"),
    "list": ("opbench.cli.info", "list_command"),
    "env": ("opbench.cli.info", "env_command"),
    "merge": ("opbench.cli.merge", "merge_command"),
    "compare": ("opbench.cli.compare", "compare_command"),
    "report": ("opbench.cli.report", "report_command"),
    "reference": ("opbench.cli.reference", "reference_app"),
    "export": ("opbench.cli.export", "export_app"),
    "suite": ("opbench.cli.suite", "suite_app"),
    "plans": ("opbench.cli.plans", "plans_app"),
}


def _load(name: str):
    module, attribute = COMMANDS[name]
    made = getattr(importlib.import_module(module), attribute)
    if isinstance(made, typer.Typer):
        command = typer.main.get_group(made)
    else:
        single = typer.Typer()
        single.command(name)(made)
        command = typer.main.get_command(single)
    command.name = name
    return command


class _LoadedOnUse(Mapping):
    """The commands by name, each built from its module on first use."""

    def __init__(self) -> None:
        self._built: dict = {}

    def __getitem__(self, name: str):
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._built:
            self._built[name] = _load(name)
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


class _Root(TyperGroup):
    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        self.commands = _LoadedOnUse()

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)


app = typer.Typer(
    name="opbench",
    cls=_Root,
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


def main() -> None:
    app()
