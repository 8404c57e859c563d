"""`opbench export onnx|sas SUITE --out DIR`: a suite's models as ONNX files for other engines.

opbench export onnx suites/cnn.yaml --out export/cnn
opbench export sas suites/cnn.yaml --out export/cnn_sas   # + a script a SAS user runs
"""

from __future__ import annotations

from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.errors import InputError

export_app = typer.Typer(
    name="export",
    help="Write a suite's models as ONNX files (and a SAS timing script) for other engines.",
    no_args_is_help=True,
)


def require_onnx(*modules: str) -> None:
    """InputError naming the first module that is missing."""
    for module in modules:
        try:
            __import__(module)
        except ImportError:
            raise InputError(f"{module} is not installed: pip install 'opbench[onnx]'") from None


def _say(msg: str) -> None:
    console.print(msg, markup=False)


SUITE_ARG = typer.Argument(..., metavar="SUITE", help="Suite YAML file.")
MODEL_OPT = typer.Option([], "--model", "-m", help="Only these models (repeatable).")


@export_app.command("onnx")
@handles_errors
def export_onnx_command(
    suite_path: Path = SUITE_ARG,
    out: Path = typer.Option(..., "--out", help="Directory to write (created if needed)."),
    model: list[str] = MODEL_OPT,
) -> None:
    """Each model as ONNX with the suite's seeded weights, one file per prefix, and a manifest."""
    from opbench.spec.load import load_suite

    suite = load_suite(suite_path)
    require_onnx("onnx")
    from opbench.export.files import export_suite

    done = export_suite(suite, out, models=model, log=_say)
    _say(f"wrote {done.files} files for {', '.join(done.models)} under {done.out}")
    _say(f"manifest: {done.manifest}")


@export_app.command("sas")
@handles_errors
def export_sas_command(
    suite_path: Path = SUITE_ARG,
    out: Path = typer.Option(..., "--out", help="Directory to write (created if needed)."),
    model: list[str] = MODEL_OPT,
) -> None:
    """The ONNX export plus time_sas_prefixes.py, which times each prefix in SAS Viya."""
    from opbench.spec.load import load_suite

    suite = load_suite(suite_path)
    require_onnx("onnx")
    from opbench.export.sas import export_sas

    done = export_sas(suite, out, models=model, log=_say)
    for name, layer, why in done.refused:
        console.print(
            f"warning: {name}: prefixes from layer {layer!r} on will fail in SAS ({why}); "
            "the script records their error and times the others",
            style="yellow",
            markup=False,
        )
    _say(f"wrote {done.onnx.files} files and {done.script} under {done.onnx.out}")
    _say(
        f"next, where SAS Viya is reachable: cd {done.onnx.out} && "
        f"python {done.script.name} --host HOST --port PORT --server-weights-dir DIR"
    )
