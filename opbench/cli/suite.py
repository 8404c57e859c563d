"""`opbench suite from-onnx MODEL.onnx --out suite.yaml`: a suite of the graph an ONNX model is.

opbench suite from-onnx resnet50.onnx --out suites/resnet50.yaml
opbench validate suites/resnet50.yaml && opbench run suites/resnet50.yaml

The import itself lives in opbench/importers/onnx/ (docs/onnx.md); this renders it.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from opbench.cli.console import console, err_console, handles_errors
from opbench.cli.export import require_onnx
from opbench.errors import InputError

suite_app = typer.Typer(name="suite", help="Make suites from other formats.", no_args_is_help=True)


def parse_dims(values: list[str]) -> dict[str, int]:
    """--dim NAME=N values as a mapping; InputError for a malformed one."""
    dims: dict[str, int] = {}
    for text in values:
        name, sep, number = text.partition("=")
        if not sep or not name or not number.isdigit() or int(number) < 1:
            raise InputError(f"--dim {text!r}: write NAME=N with N ≥ 1 (a symbolic input dim)")
        dims[name] = int(number)
    return dims


def print_unsupported(imported, stream=None) -> None:
    """One line per unsupported node (node, op type, module), grouped by op type with counts."""
    out = stream or err_console
    for op_type, count, items in imported.unsupported_by_type():
        out.print(f"  {op_type} ×{count}", markup=False)
        for u in items:
            where = f" in {u.module}" if u.module else ""
            out.print(f"    {u.node}{where}: {u.reason}", markup=False)


@suite_app.command("from-onnx")
@handles_errors
def from_onnx_command(
    model_path: Path = typer.Argument(..., metavar="MODEL.onnx", help="ONNX model file."),
    out: Path = typer.Option(..., "--out", help="Suite YAML to write."),
    skip_unsupported: bool = typer.Option(
        False,
        "--skip-unsupported",
        help="Write a placeholder layer (never measured) for each unsupported node, so the "
        "graph stays connected.",
    ),
    batch: int | None = typer.Option(
        None,
        "--batch",
        min=1,
        help="Batch size: the value of a symbolic batch dim, or the suite's batch.",
    ),
    dim: list[str] = typer.Option(
        [], "--dim", metavar="NAME=N", help="A value for another symbolic input dim (repeatable)."
    ),
    name: str | None = typer.Option(None, "--name", help="Suite name (default: the file name)."),
    dtype: str = typer.Option("float32", "--dtype", help="The suite's dtype."),
) -> None:
    """A suite of the model's graph: one layer per op (patterns folded), joins named by inputs."""
    require_onnx("onnx", "onnxscript")
    from opbench.importers.onnx import import_onnx
    from opbench.importers.onnx.suite_yaml import portable_name, suite_text, write_suite
    from opbench.spec.model import DTYPES

    if dtype not in DTYPES:
        raise InputError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    started = time.perf_counter()
    imported = import_onnx(
        model_path,
        batch=batch,
        dims=parse_dims(dim),
        log=lambda msg: err_console.print(msg, style="yellow", markup=False),
    )
    took = time.perf_counter() - started
    if imported.unsupported and not skip_unsupported:
        err_console.print(
            f"{model_path}: {len(imported.unsupported)} node(s) opbench has no op for:",
            markup=False,
        )
        print_unsupported(imported)
        raise InputError(
            f"{model_path}: not written; --skip-unsupported writes a placeholder for each "
            "(never measured) and keeps the graph connected"
        )
    lost = [u.node for u in imported.unsupported if u.op_type == "output"]
    if lost:
        # Placeholders keep the graph connected only where a node's output shape is known:
        # a model output that still cannot be made would leave the suite a truncated model,
        # the unsupported node dropped with it.
        print_unsupported(imported)
        raise InputError(
            f"{model_path}: not written; model output(s) {', '.join(lost)} cannot be made even "
            "with placeholders (above; e.g. a node of an unknown domain whose output shape ONNX "
            "cannot infer): the suite would not be the whole model"
        )
    stem = portable_name(model_path.stem, "onnx_model")
    suite_name = portable_name(name, stem) if name else stem
    from_opbench = imported.producer == "opbench" and imported.graph_name
    model_name = portable_name(imported.graph_name, stem) if from_opbench else stem
    if batch is not None:
        imported.batch = batch
    text = suite_text(imported, suite_name, model_name, model_path.name, dtype)
    suite = write_suite(imported, out, text)
    if imported.unsupported:
        console.print(f"placeholders for {len(imported.unsupported)} unsupported node(s):")
        print_unsupported(imported, console)
    absorbed = len(imported.absorbed)
    console.print(
        f"wrote {out}: {len(suite.models[0].layers)} layers of model {model_name!r} from "
        f"{imported.node_count} nodes ({absorbed} absorbed as views or constants), "
        f"batch dim {imported.batch_axis} of the input; imported in {took:.1f} s",
        markup=False,
    )
    console.print(f"next: opbench validate {out} && opbench run {out}", markup=False)
