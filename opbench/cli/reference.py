"""`opbench reference ENGINE SUITE`: produce a reference timing file by running another engine.

opbench reference onnxruntime suites/quickstart.yaml --out ref.json --runs 20
opbench reference onnxruntime model.onnx --out ref.json      # the file itself, its weights
opbench compare --reference ref.json
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.cli.export import require_onnx
from opbench.errors import InputError

reference_app = typer.Typer(
    name="reference",
    help="Produce reference timings by running another engine on a suite.",
    no_args_is_help=True,
)


@reference_app.command("onnxruntime")
@handles_errors
def onnxruntime_command(
    suite_path: Path = typer.Argument(
        ..., metavar="SUITE", help="Suite YAML file, or an ONNX model (profiled as it is)."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Profile to write (default: reports/reference/<suite>_onnxruntime_<device>.json).",
    ),
    runs: int = typer.Option(20, "--runs", min=1, help="Profiled runs after one warm-up run."),
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=1,
        help="ONNX Runtime's intra-op threads (default: what `opbench run` times the CPU with: "
        "OMP_NUM_THREADS, else half the cores); recorded in the .meta.json beside the profile.",
    ),
    batch: int | None = typer.Option(
        None, "--batch", min=1, help="ONNX model: the batch (the file's by default)."
    ),
    model: list[str] = typer.Option([], "--model", "-m", help="Only these models (repeatable)."),
) -> None:
    """Profile the suite's models with ONNX Runtime and write ORT's profile. A suite is written
    to ONNX first (as `opbench export onnx`); an ONNX model is profiled itself, with its own
    weights, its nodes renamed after the layers `opbench run MODEL.onnx` makes of it."""
    from opbench.cli.onnx_input import is_onnx

    say = lambda msg: console.print(msg, markup=False)  # noqa: E731
    if is_onnx(suite_path):
        require_onnx("onnx", "onnxscript", "onnxruntime")
        from opbench.engines.onnxruntime import pick_provider
        from opbench.engines.onnxruntime_file import profile_file

        name = suite_path.stem
        target = out or _default_out(name, pick_provider()[1])
        result = profile_file(suite_path, target, batch=batch, runs=runs, threads=threads, log=say)
    else:
        from opbench.spec.load import load_suite

        if batch is not None:
            raise InputError("--batch is for an ONNX model; a suite sets its own")
        suite = load_suite(suite_path)
        imported_from = _imported_from(suite_path)
        if imported_from:
            say(
                f"note: {suite_path.name} was imported from {imported_from}: this profiles its "
                f"layers with seeded weights; `opbench reference onnxruntime {imported_from}` "
                "profiles the file itself, with its weights"
            )
        require_onnx("onnx", "onnxruntime")
        from opbench.engines.onnxruntime import pick_provider, profile_suite

        target = out or _default_out(suite.name, pick_provider()[1])
        result = profile_suite(suite, target, runs=runs, threads=threads, models=model, log=say)
    for skipped in result.skipped:
        console.print(
            f"left out {skipped.model}/{skipped.layer} ({skipped.op}): {skipped.reason}",
            style="yellow",
            markup=False,
        )
    threads_used = result.meta_data.get("intra_op_threads")
    say(
        f"wrote {result.profile} ({result.nodes} ONNX nodes from {result.layers} layers of "
        f"{', '.join(result.models)}; {result.warmup} warm-up + {result.runs} runs on "
        f"{result.provider}, {threads_used} thread(s)) and {result.meta.name}"
    )
    say(f"next: opbench compare --reference {result.profile}")


def _default_out(name: str, device: str) -> Path:
    return Path("reports") / "reference" / f"{name}_onnxruntime_{device}.json"


_IMPORTED = re.compile(r"^# Written by `opbench suite from-onnx` from (\S+\.onnx)")


def _imported_from(path: Path) -> str | None:
    """The ONNX file a suite was written from (`suite from-onnx` says so on its first line)."""
    try:
        with path.open(encoding="utf-8-sig") as fh:
            found = _IMPORTED.match(fh.readline())
    except (OSError, UnicodeDecodeError):
        return None
    return found.group(1) if found else None
