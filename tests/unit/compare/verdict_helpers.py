"""Runs, fixtures and CLI calls shared by the verdict case tests: a run built from
(name, op, output shape, reference_name, ms) specs, compared with a fixture of
tests/data/reference, in Python or through `opbench compare`."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from opbench.cli.main import app
from opbench.compare.compare import compare_run
from opbench.reference.interface import ReaderOptions
from opbench.reference.registry import read_reference
from opbench.results.io import write_run
from opbench.results.model import Correctness, LayerResult, RunResult

DATA = Path(__file__).parents[2] / "data" / "reference"
GOOD = Correctness(rel_l2=1e-6, max_abs=1e-6, nonfinite=0, tolerance=1e-4)

# The small CNN of the SAS fixtures: the suite groups the ReLU that SAS fuses into conv2d_1 by
# giving it reference_name Conv2d_1, as docs/suite-format.md says.
CNN = (
    # name, op, output shape, reference_name, triton ms
    ("Conv2d_1", "conv2d", (1, 8, 32, 32), None, 0.100),
    ("relu_a", "relu", (1, 8, 32, 32), "Conv2d_1", 0.035),
    ("pool1", "maxpool2d", (1, 8, 16, 16), None, 0.020),
    ("flat", "flatten", (1, 2048), None, 0.001),
    ("fc1", "linear", (1, 10), None, 0.040),
    ("relu_b", "relu", (1, 10), None, 0.002),
)


def layer_result(
    model: str, name: str, op: str, shape, ms: float, *, device="cuda", **kw
) -> LayerResult:
    return LayerResult(
        model=model,
        layer=name,
        op=op,
        backend="triton",
        status="ok",
        dtype="float32",
        input_shape=shape,
        output_shape=shape,
        samples_ms=((ms,) * 20,),  # equal samples: the median's interval is a point
        correctness=GOOD,
        device=device,
        flops=2_000_000,
        bytes=100_000,
        **kw,
    )


def run_of(layers, model: str = "cnn", device: str = "cuda", **kw) -> RunResult:
    spec = {
        "models": [
            {
                "name": model,
                "layers": [
                    {"name": n, "op": op, "output_shape": list(shape), "reference_name": ref}
                    for n, op, shape, ref, _ in layers
                ],
            }
        ]
    }
    results = tuple(
        layer_result(model, n, op, shape, ms, device=device, **kw) for n, op, shape, _, ms in layers
    )
    return RunResult(
        suite="cases",
        started_at="2026-11-24T00:00:00Z",
        device=device,
        layers=results,
        suite_spec=spec,
        complete=True,
    )


def compare_file(run: RunResult, name: str, **kw):
    return compare_run(run, read_reference(DATA / name, "auto", ReaderOptions()), **kw)


def rows_of(comparison):
    return {row.layers: row for row in comparison.rows}


def cli_compare(tmp_path: Path, run: RunResult, name: str, *args: str):
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    write_run(run, folder / "run.json")
    return CliRunner().invoke(
        app,
        [
            "compare",
            str(folder),
            "--reference",
            str(DATA / name),
            "--out",
            str(tmp_path / "out"),
            *args,
        ],
    )
