"""`opbench validate`, `opbench list`, `opbench env`: look, without running anything."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from opbench.cli.console import console, err_console, handles_errors
from opbench.cli.onnx_input import suite_or_onnx
from opbench.cli.plugins import load_plugins, plugin_option
from opbench.errors import ExitCode, OpbenchError
from opbench.spec.model import SuiteSpec
from opbench.spec.problems import SuiteErrors


@handles_errors
def validate_command(
    suite_paths: list[Path] = typer.Argument(
        ..., metavar="SUITE...", help="Suite YAML file(s), or ONNX models (imported)."
    ),
    plugin: list[str] = plugin_option(),
) -> None:
    """Check suites without running them: structure, ops, parameters, what each layer reads
    and every shape. Every mistake of every file is reported, one line each; exit 2 if there
    is any. Warnings (a model in disconnected pieces, an output nothing reads) do not fail."""
    load_plugins(plugin)
    problems: list[OpbenchError] = []
    for suite_path in suite_paths:
        try:
            suite = suite_or_onnx(suite_path)
        except SuiteErrors as exc:
            problems += exc.errors
            continue
        except OpbenchError as exc:
            problems.append(exc)
            continue
        _print_suite(suite)
        for warning in suite.warnings:
            err_console.print("warning: ", style="bold yellow", end="")
            err_console.print(str(warning), markup=False, soft_wrap=True)
        console.print(f"[green]{escape(str(suite_path))} is valid[/]")
    if problems:
        for problem in problems:
            err_console.print("error: ", style="bold red", end="")
            err_console.print(str(problem), markup=False, soft_wrap=True)
        if len(suite_paths) > 1 or len(problems) > 1:
            bad = len({p.location.file for p in problems})
            err_console.print(f"{len(problems)} problem(s) in {bad} of {len(suite_paths)} file(s)")
        raise typer.Exit(ExitCode.BAD_INPUT)


def _print_suite(suite: SuiteSpec) -> None:
    layers = sum(len(m.layers) for m in suite.models)
    table = Table(
        title=f"{escape(suite.name)}: {len(suite.models)} model instance(s), {layers} layers",
        title_justify="left",
    )
    for column in ("model", "layer", "op", "dtype", "input", "output", "backends", "reads"):
        table.add_column(column)
    for model in suite.models:
        for layer in model.layers:
            table.add_row(
                escape(model.name),
                escape(layer.name),
                layer.op,
                layer.dtype,
                " ".join(str(list(s)) for s in layer.input_shapes),
                str(list(layer.output_shape)),
                ", ".join(layer.backends),
                escape(", ".join(layer.inputs)),
            )
    console.print(table)


class ListWhat(str, Enum):
    ops = "ops"
    backends = "backends"


@handles_errors
def list_command(
    what: ListWhat = typer.Argument(..., help="ops or backends"),
    plugin: list[str] = plugin_option(),
) -> None:
    """List the ops or the backends opbench knows, and where each came from."""
    load_plugins(plugin)
    from opbench.vocabulary import backend_origin, op_origin

    if what == ListWhat.ops:
        from opbench.ops.base import REQUIRED
        from opbench.ops.registry import OPS

        table = Table(title="ops")
        for column in ("op", "from", "parameters (= default)", "what it computes"):
            table.add_column(column, overflow="fold")
        for op in OPS.values():
            params = ", ".join(
                p.name if p.default is REQUIRED else f"{p.name}={_show(p.default)}"
                for p in op.params
            )
            table.add_row(op.name, escape(op_origin(op.name)), params or "—", op.summary)
        console.print(table)
        return
    from opbench.backends.registry import backend_names, get_backend
    from opbench.pipeline import default_device, prepare_device

    device = default_device()
    prepare_device(device)
    table = Table(title=f"backends (device {device})")
    for column in ("backend", "from", "status"):
        table.add_column(column, overflow="fold")
    for name in backend_names():
        try:
            reason = get_backend(name).unavailable_reason(device)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
        status = (
            "[green]available[/]" if reason is None else f"[yellow]unavailable[/]: {escape(reason)}"
        )
        table.add_row(name, escape(backend_origin(name)), status)
    console.print(table)


def _show(value) -> str:
    if isinstance(value, tuple):
        return str(list(value))
    return str(value).lower() if isinstance(value, bool) else str(value)


@handles_errors
def env_command(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print the environment fingerprint that every run records."""
    from opbench.measure.env import fingerprint
    from opbench.pipeline import default_device

    env = fingerprint(default_device())
    if as_json:
        console.print_json(json.dumps(env))
        return
    table = Table(title="environment")
    table.add_column("key")
    table.add_column("value", overflow="fold")
    for key, value in env.items():
        table.add_row(key, str(value))
    console.print(table)
