"""`opbench suite from-onnx MODEL.onnx --out suite.yaml`: a suite from an ONNX model's chain.

opbench suite from-onnx resnet_sas.onnx --out suites/resnet_sas.yaml
opbench validate suites/resnet_sas.yaml && opbench run suites/resnet_sas.yaml
"""

from __future__ import annotations

from pathlib import Path

import typer

from opbench.cli.console import console, handles_errors
from opbench.cli.export import require_onnx
from opbench.errors import InputError

suite_app = typer.Typer(name="suite", help="Make suites from other formats.", no_args_is_help=True)


@suite_app.command("from-onnx")
@handles_errors
def from_onnx_command(
    model_path: Path = typer.Argument(..., metavar="MODEL.onnx", help="ONNX model file."),
    out: Path = typer.Option(..., "--out", help="Suite YAML to write."),
    skip_unsupported: bool = typer.Option(
        False,
        "--skip-unsupported",
        help="Leave unsupported nodes and branches out (a comment in the YAML says which).",
    ),
    batch: int | None = typer.Option(
        None, "--batch", min=1, help="Batch size, when the model's batch dimension is symbolic."
    ),
    name: str | None = typer.Option(None, "--name", help="Suite name (default: the file name)."),
) -> None:
    """A suite of the model's supported nodes: layer names from node names, shapes from ONNX."""
    require_onnx("onnx")
    import onnx

    from opbench.export.from_onnx_suite import portable_name, read_chain, suite_yaml, write_suite

    if not model_path.is_file():
        raise InputError(f"no such ONNX file: {model_path}")
    try:
        # weights kept beside the model (ONNX external data, as `opbench export` writes them)
        # are read from there
        proto = onnx.load(str(model_path))
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad input file
        raise InputError(f"{model_path}: not an ONNX model ({type(exc).__name__})") from None
    chain = read_chain(proto, batch=batch, skip_unsupported=skip_unsupported)
    if chain.unsupported and not skip_unsupported:
        listed = "; ".join(f"{u.name} ({u.op_type}): {u.reason}" for u in chain.unsupported)
        raise InputError(
            f"{model_path}: {len(chain.unsupported)} node(s) are not a chain of supported ops "
            f"(--skip-unsupported leaves them out): {listed}"
        )
    stem = portable_name(model_path.stem, "onnx_model")
    suite_name = portable_name(name, stem) if name else stem
    model_name = portable_name(chain.graph_name, stem)
    dtype = "float32"
    text = suite_yaml(chain, suite_name, model_name, model_path.name, dtype)
    suite = write_suite(chain, out, text)
    for item in chain.unsupported:
        console.print(
            f"left out {item.name} ({item.op_type}): {item.reason}", style="yellow", markup=False
        )
    console.print(
        f"wrote {out}: {len(suite.models[0].layers)} layers of model {model_name!r}", markup=False
    )
    console.print(f"next: opbench validate {out} && opbench run {out}", markup=False)
