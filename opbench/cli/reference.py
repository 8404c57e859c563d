"""`opbench reference ENGINE SUITE`: produce a reference timing file by running another engine.

opbench reference onnxruntime suites/quickstart.yaml --out ref.json --runs 20
opbench compare --reference ref.json
"""

from __future__ import annotations

from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.cli.export import require_onnx

reference_app = typer.Typer(
    name="reference",
    help="Produce reference timings by running another engine on a suite.",
    no_args_is_help=True,
)


@reference_app.command("onnxruntime")
@handles_errors
def onnxruntime_command(
    suite_path: Path = typer.Argument(..., metavar="SUITE", help="Suite YAML file."),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Profile to write (default: reports/reference/<suite>_onnxruntime_<device>.json).",
    ),
    runs: int = typer.Option(20, "--runs", min=1, help="Profiled runs after one warm-up run."),
    model: list[str] = typer.Option([], "--model", "-m", help="Only these models (repeatable)."),
) -> None:
    """Write the suite's models to ONNX (as `opbench export onnx`), profile them with ONNX Runtime,
    write ORT's profile."""
    from opbench.spec.load import load_suite

    suite = load_suite(suite_path)
    require_onnx("onnx", "onnxruntime")
    from opbench.engines.onnxruntime import pick_provider, profile_suite

    device = pick_provider()[1]
    target = out or Path("reports") / "reference" / f"{suite.name}_onnxruntime_{device}.json"
    result = profile_suite(
        suite, target, runs=runs, models=model, log=lambda msg: console.print(msg, markup=False)
    )
    for skipped in result.skipped:
        console.print(
            f"left out {skipped.model}/{skipped.layer} ({skipped.op}): {skipped.reason}",
            style="yellow",
            markup=False,
        )
    console.print(
        f"wrote {result.profile} ({result.nodes} ONNX nodes from {result.layers} layers of "
        f"{', '.join(result.models)}; {result.warmup} warm-up + {result.runs} runs on {result.provider}) "
        f"and {result.meta.name}",
        markup=False,
    )
    console.print(f"next: opbench compare --reference {result.profile}", markup=False)
