"""`opbench export onnx|sas SUITE --out DIR`: a suite's models as ONNX files for other engines.

opbench export onnx suites/cnn.yaml --out export/cnn
opbench export sas suites/cnn.yaml --out export/cnn_sas   # + a script a SAS user runs
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.cli.onnx_input import require_onnx, suite_or_onnx

export_app = typer.Typer(
    name="export",
    help="Write a suite's models as ONNX files (and a SAS timing script) for other engines.",
    no_args_is_help=True,
)


def _say(msg: str) -> None:
    console.print(msg, markup=False)


SUITE_ARG = typer.Argument(
    ..., metavar="SUITE", help="Suite YAML file, or an ONNX model (imported as `opbench run` does)."
)
MODEL_OPT = typer.Option([], "--model", "-m", help="Only these models (repeatable).")


@export_app.command("onnx")
@handles_errors
def export_onnx_command(
    suite_path: Path = SUITE_ARG,
    out: Path = typer.Option(..., "--out", help="Directory to write (created if needed)."),
    model: list[str] = MODEL_OPT,
) -> None:
    """Each model as ONNX with the suite's seeded weights (written once), one file per cut
    (a layer and everything it depends on), and a manifest."""
    suite = suite_or_onnx(suite_path)
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
    """The ONNX export plus time_sas_prefixes.py, which times each cut in SAS Viya; names
    every layer DLPy's ONNX import cannot take, with what can be done."""
    suite = suite_or_onnx(suite_path)
    require_onnx("onnx")
    from opbench.export.sas import export_sas

    done = export_sas(suite, out, models=model, log=_say)
    for level, line in grouped_notices(done.notices):
        console.print(line, style="yellow" if level == "warning" else None, markup=False)
    for name, (timed, layers) in done.timed.items():
        rest = (
            ""
            if timed == layers
            else f"; the script records the other {layers - timed} as not timed"
        )
        _say(f"{name}: SAS can time {timed} of {layers} layers{rest}")
        remedies = dict.fromkeys(n.remedy for n in done.notices if n.model == name and n.remedy)
        for remedy in remedies:
            _say(f"  {remedy}")
    _say(f"wrote {done.onnx.files} files and {done.script} under {done.onnx.out}")
    _say(
        f"next, where SAS Viya is reachable: cd {done.onnx.out} && "
        f"python {done.script.name} --host HOST --port PORT --server-weights-dir DIR"
    )


_LAYER = re.compile(r"^layer '([^']*)' ")


def grouped_notices(notices) -> list[tuple[str, str]]:
    """(level, line) per notice; notices that say the same of several layers (35 ReLU6 timed
    as ReLU) are one line with the count and the first few layers."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for notice in notices:
        found = _LAYER.match(notice.text)
        rest = notice.text[found.end() :] if found else notice.text
        key = (notice.level, notice.model, rest if found else notice.text)
        groups.setdefault(key, []).append(found.group(1) if found else "")
    lines = []
    for (level, model, rest), layers in groups.items():
        if len(layers) == 1:
            text = f"layer {layers[0]!r} {rest}" if layers[0] else rest
        else:
            shown = ", ".join(layers[:4]) + (
                f" and {len(layers) - 4} more" if len(layers) > 4 else ""
            )
            text = f"{len(layers)} layers {rest} ({shown})"
        lines.append((level, f"{level}: {model}: {text}"))
    return lines
